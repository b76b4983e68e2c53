"""Container log files: the CRI line format, and size-based rotation.

Each run of a container has one log file in which the supervisor writes every chunk
of output as it arrives, as the CRI runtimes (containerd, CRI-O) do:

    2026-11-30T13:16:55.123456789Z stdout F hello
    2026-11-30T13:16:55.200000000Z stderr P a prompt without newline

time (RFC 3339, UTC, nine fractional digits), stream, `F` for a chunk that ends a
line (the newline itself is not stored) or `P` for a partial one, then the bytes.
One file keeps stdout and stderr apart by tag and in their true order. When the file
reaches `max_bytes` it is renamed to `.1` (older ones to `.2`, ...; `max_files`
counts them all) and a new one is started; readers go through them oldest first.

Standard library only (and vkpy.core.rfc3339, which is too): the supervisor imports it.
"""

from __future__ import annotations

import calendar
import contextlib
import os
import time
from collections.abc import Iterator
from pathlib import Path
from typing import NamedTuple

from vkpy.core.rfc3339 import format_nano, parse_nano

MAX_LINE = 16 * 1024
"""Longer lines are split into partial records, as the CRI runtimes do."""
STREAMS = ("stdout", "stderr")
_STREAM_NAMES = {b"stdout": "stdout", b"stderr": "stderr"}


def rfc3339_nano(ns: int) -> str:
    """`ns` since the epoch as RFC 3339 in UTC with exactly nine fractional digits."""
    return format_nano(ns)


def parse_rfc3339_nano(text: str) -> int:
    """Nanoseconds since the epoch from an RFC 3339 UTC time with any fraction."""
    if not text.endswith("Z"):
        raise ValueError(f"not a UTC time: {text!r}")
    return parse_nano(text)


def format_record(ns: int, stream: str, data: bytes, partial: bool) -> bytes:
    """One log line (with its newline) for a chunk of output without newlines."""
    tag = "P" if partial else "F"
    return f"{rfc3339_nano(ns)} {stream} {tag} ".encode() + data + b"\n"


class Record(NamedTuple):
    """One record read back (a tuple: there are millions of them in a big log)."""

    ns: int
    stream: str
    partial: bool
    data: bytes
    """The output as the process wrote it: with its newline for full lines."""


_SECONDS_CACHE: dict[bytes, int] = {}


def _stamp_ns(stamp: bytes) -> int:
    """parse_rfc3339_nano for the writer's own fixed layout, with the whole-second part
    cached (consecutive lines share it); anything else goes the general way."""
    if len(stamp) == 30 and stamp[19:20] == b"." and stamp[29:30] == b"Z":
        prefix = stamp[:19]
        seconds = _SECONDS_CACHE.get(prefix)
        if seconds is None:
            seconds = calendar.timegm(
                (
                    int(prefix[0:4]),
                    int(prefix[5:7]),
                    int(prefix[8:10]),
                    int(prefix[11:13]),
                    int(prefix[14:16]),
                    int(prefix[17:19]),
                    0,
                    0,
                    0,
                )
            )
            if len(_SECONDS_CACHE) > 4096:
                _SECONDS_CACHE.clear()
            _SECONDS_CACHE[prefix] = seconds
        return seconds * 1_000_000_000 + int(stamp[20:29])
    return parse_rfc3339_nano(stamp.decode())


def parse_record(line: bytes) -> Record | None:
    """A log line (without its trailing newline) as a Record; None when malformed."""
    space = line.find(b" ")
    rest = line[space + 1 :]
    if space < 0 or len(rest) < 8 or rest[6:7] != b" " or rest[8:9] not in (b" ", b""):
        return None
    stream = _STREAM_NAMES.get(rest[:6])
    tag = rest[7:8]
    if stream is None or tag not in (b"P", b"F"):
        return None
    try:
        ns = _stamp_ns(line[:space])
    except (ValueError, UnicodeDecodeError):
        return None
    content = rest[9:]
    if tag == b"P":
        return Record(ns, stream, True, content)
    return Record(ns, stream, False, content + b"\n")


def split_output(data: bytes, max_line: int = MAX_LINE) -> Iterator[tuple[bytes, bool]]:
    """Chunks of output as (content, partial): full lines lose their newline."""
    start = 0
    while start < len(data):
        end = data.find(b"\n", start, start + max_line)
        if end < 0:
            stop = min(len(data), start + max_line)
            yield data[start:stop], True
            start = stop
        else:
            yield data[start:end], False
            start = end + 1


def log_files(path: Path) -> list[Path]:
    """The current log file and its rotated predecessors, oldest first."""
    rotated = []
    n = 1
    while (candidate := path.with_name(f"{path.name}.{n}")).exists():
        rotated.append(candidate)
        n += 1
    return [*reversed(rotated), path]


class LogWriter:
    """Appends records to a log file, rotating it by size."""

    def __init__(self, path: Path, max_bytes: int, max_files: int) -> None:
        self._path = path
        self._max_bytes = max(4096, max_bytes)
        self._max_files = max(1, max_files)
        self._fd = self._open()
        self._size = os.fstat(self._fd).st_size

    def _open(self) -> int:
        return os.open(self._path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o640)

    def write(self, stream: str, data: bytes, ns: int | None = None) -> None:
        """Record output of `stream` read just now."""
        when = time.time_ns() if ns is None else ns
        lines = b"".join(
            format_record(when, stream, chunk, partial) for chunk, partial in split_output(data)
        )
        if not lines:
            return
        view = memoryview(lines)
        while view:
            written = os.write(self._fd, view)
            view = view[written:]
        self._size += len(lines)
        if self._size >= self._max_bytes:
            self.rotate()

    def rotate(self) -> None:
        """Start a new file; the oldest beyond `max_files` is removed."""
        os.close(self._fd)
        if self._max_files == 1:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(self._path)
        else:
            oldest = self._path.with_name(f"{self._path.name}.{self._max_files - 1}")
            with contextlib.suppress(FileNotFoundError):
                os.unlink(oldest)
            for n in range(self._max_files - 2, 0, -1):
                with contextlib.suppress(FileNotFoundError):
                    os.replace(
                        self._path.with_name(f"{self._path.name}.{n}"),
                        self._path.with_name(f"{self._path.name}.{n + 1}"),
                    )
            os.replace(self._path, self._path.with_name(f"{self._path.name}.1"))
        self._fd = self._open()
        self._size = 0

    def close(self) -> None:
        with contextlib.suppress(OSError):
            os.close(self._fd)
