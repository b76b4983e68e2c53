"""`kubectl exec -it pod -- sh` under a real pseudo-terminal, as a person types it.

A prompt comes, commands are answered, `stty size` follows the terminal being
resized, and `exit 3` ends the session with kubectl exiting 3; on the sim backend
(its built-in shell) and on the process backend (a real /bin/sh on a pty), over both
transports.
"""

# ruff: noqa: F811 - pytest fixtures are imported by name and then requested as arguments
from __future__ import annotations

import time

import pytest

from tests.integration.stream_fixtures import Box, process_box, sim_box  # noqa: F401
from tests.integration.stream_helpers import TRANSPORTS, Terminal, kubectl_env
from vkpy.devcluster import ClusterAccess

PROMPT = r"[$#] $"


def drive_shell(cluster: ClusterAccess, box: Box, namespace: str, transport: str) -> None:
    argv = cluster.kubectl_argv("exec", "-it", "-n", namespace, box.pod, "-c", "app", "--", "sh")
    terminal = Terminal(argv, kubectl_env(cluster, transport), rows=30, cols=100)
    try:
        terminal.expect(PROMPT)
        terminal.send("echo hello\r")
        assert "\r\nhello\r\n" in terminal.expect(PROMPT)
        terminal.send("stty size\r")
        assert "\r\n30 100\r\n" in terminal.expect(PROMPT)
        terminal.resize(40, 132)
        # The new size travels kubectl -> API server -> kubelet on its own stream, so
        # it may arrive after a command typed right away: ask until it shows.
        for _ in range(20):
            terminal.send("stty size\r")
            out = terminal.expect(PROMPT)
            if "40 132" in out:
                break
            time.sleep(0.25)
        assert "\r\n40 132\r\n" in out
        terminal.send("exit 3\r")
        assert terminal.wait() == 3
    finally:
        terminal.kill()


@pytest.mark.parametrize("transport", TRANSPORTS)
def test_interactive_shell_on_sim(
    cluster: ClusterAccess, sim_box: Box, namespace: str, transport: str
) -> None:
    drive_shell(cluster, sim_box, namespace, transport)


@pytest.mark.parametrize("transport", TRANSPORTS)
def test_interactive_shell_on_process(
    cluster: ClusterAccess, process_box: Box, namespace: str, transport: str
) -> None:
    before = process_box.footprint()
    drive_shell(cluster, process_box, namespace, transport)
    process_box.assert_released(before)
