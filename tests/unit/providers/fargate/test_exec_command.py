"""The ECS Exec command wrapper: the command line ECS gets, stdin's base64 lines with
their end, and the markers taken out of the output however the output is cut."""

from __future__ import annotations

import base64
import os
import shlex
import subprocess

import pytest

from vkpy.providers.fargate.exec_command import (
    READY,
    OutputFilter,
    StdinEncoder,
    command_line,
)


def test_argv_reaches_the_command_unchanged() -> None:
    argv = ["printf", "%s|", "a b", "it's", "$HOME", "*"]
    line = command_line(argv, stdin=False, tty=False)
    words = shlex.split(line)
    assert words[:2] == ["/bin/sh", "-c"]
    assert words[3:] == ["vkpy-exec", *argv]
    done = subprocess.run(words, capture_output=True, check=True)  # no terminal: stty fails quietly
    filtered = OutputFilter()
    assert filtered.feed(done.stdout) == b"a b|it's|$HOME|*|"
    assert (filtered.ready, filtered.exit_code) == (True, 0)


def test_the_exit_status_is_reported_and_stdin_decoded() -> None:
    payload = os.urandom(10_000)
    encoder = StdinEncoder()
    lines = b"".join(encoder.feed(payload[i : i + 7]) for i in range(0, len(payload), 7))
    lines += encoder.finish()
    assert lines.endswith(b"\n.\n")
    words = shlex.split(command_line(["sh", "-c", "cat; exit 5"], stdin=True, tty=False))
    stdin = lines + b"ignored after the end\n"
    done = subprocess.run(words, input=stdin, capture_output=True, check=False)
    filtered = OutputFilter()
    assert filtered.feed(done.stdout) == payload
    assert filtered.exit_code == 5 and done.returncode == 5


def test_stdin_lines_are_whole_base64() -> None:
    encoder = StdinEncoder()
    first = encoder.feed(b"ab")  # not a multiple of 3 yet: held
    assert first == b""
    second = encoder.feed(b"cd")
    assert second == base64.b64encode(b"abc") + b"\n"
    assert encoder.finish() == base64.b64encode(b"d") + b"\n.\n"
    assert StdinEncoder().finish() == b".\n"


@pytest.mark.parametrize("cut", [1, 2, 3, 5, 11, 1000])
def test_markers_are_removed_however_the_output_is_cut(cut: int) -> None:
    stream = READY + b"hello \x1e world\n" + b"\x1evkpy-exit:42\x1e"
    filtered = OutputFilter()
    out = b"".join(filtered.feed(stream[i : i + cut]) for i in range(0, len(stream), cut))
    out += filtered.flush()
    assert out == b"hello \x1e world\n"
    assert (filtered.ready, filtered.exit_code) == (True, 42)


def test_an_unfinished_marker_at_the_end_is_output() -> None:
    filtered = OutputFilter()
    assert filtered.feed(b"x\x1evkpy-ex") == b"x"
    assert filtered.flush() == b"\x1evkpy-ex"
    assert filtered.exit_code is None
