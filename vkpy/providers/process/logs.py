"""Reading a container's log files for `kubectl logs`: previous, since, tail, follow.

The supervisor writes CRI-format lines (logfile.py); this turns them back into
`LogRecord`s for the kubelet API. The current run's files are read, or with
`previous` the run before it; records are filtered by stream and time and the last
`tail_lines` kept. With `follow`, the current file is then polled for new lines,
across rotations (the old file is drained before the new one is opened), until the
run has ended and everything it wrote was read. File reads happen in a thread.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
from collections import deque
from collections.abc import AsyncIterator, Iterable
from datetime import UTC, datetime
from pathlib import Path

from vkpy.providers.base import LogQuery, LogRecord
from vkpy.providers.errors import NotFoundError
from vkpy.providers.process.container import ContainerRunner
from vkpy.providers.process.layout import InstanceDir
from vkpy.providers.process.logfile import Record, log_files, parse_record

FOLLOW_POLL = 0.2
CHUNK = 1 << 16


class LogCursor:
    """Reads one log file (and its rotations) from the start, then as it grows."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._fd: int | None = None
        self._pending = b""
        self._mid_record = False
        """Positioned inside a record (`skip_to_end`): its rest is not a record."""

    def close(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None

    def _parse(self, data: bytes) -> list[Record]:
        data = self._pending + data
        lines = data.split(b"\n")
        self._pending = lines.pop()
        if self._mid_record and lines:
            lines.pop(0)
            self._mid_record = False
        return [r for line in lines if (r := parse_record(line)) is not None]

    def _drain(self) -> list[Record]:
        assert self._fd is not None
        chunks = []
        while chunk := os.read(self._fd, CHUNK):
            chunks.append(chunk)
        return self._parse(b"".join(chunks))

    def read_all(self) -> list[Record]:
        """Every record written so far: rotated files, then the current one."""
        records: list[Record] = []
        files = log_files(self.path)
        for rotated in files[:-1]:
            with contextlib.suppress(OSError):
                self._pending = b""
                records += self._parse(rotated.read_bytes())
        self._pending = b""
        try:
            self._fd = os.open(self.path, os.O_RDONLY)
        except FileNotFoundError:
            return records
        return records + self._drain()

    def skip_to_end(self) -> None:
        """Start after everything written so far, reading nothing of it: `read_more`
        then returns only what is written from now on (attach). Cheap enough for the
        event loop: an open and a seek, so the position is fixed before the caller
        does anything that could make the container write."""
        try:
            self._fd = os.open(self.path, os.O_RDONLY)
        except FileNotFoundError:
            return  # nothing written yet: read_more opens it and reads from its start
        end = os.lseek(self._fd, 0, os.SEEK_END)
        if end > 0:
            self._mid_record = os.pread(self._fd, 1, end - 1) != b"\n"

    def read_more(self) -> list[Record]:
        """Records written since the last read, following a rotation."""
        if self._fd is None:
            try:
                self._fd = os.open(self.path, os.O_RDONLY)
            except FileNotFoundError:
                return []
        records = self._drain()
        try:
            rotated = os.stat(self.path).st_ino != os.fstat(self._fd).st_ino
        except FileNotFoundError:
            rotated = True
        if rotated:
            records += self._drain()
            self.close()
            self._pending = b""
            self._mid_record = False
        return records


def _select(records: Iterable[Record], query: LogQuery) -> list[Record]:
    since = None if query.since is None else int(query.since.timestamp() * 1e9)
    chosen = (r for r in records if r.stream in query.streams and (since is None or r.ns >= since))
    if query.tail_lines is None:
        return list(chosen)
    if query.tail_lines <= 0:
        return []
    return list(deque(chosen, maxlen=query.tail_lines))


def _record(record: Record) -> LogRecord:
    when = datetime.fromtimestamp(record.ns / 1e9, UTC)
    return LogRecord(time=when, stream=record.stream, data=record.data)  # type: ignore[arg-type]


async def read_logs(runner: ContainerRunner, pod: str, query: LogQuery) -> AsyncIterator[LogRecord]:
    """The container's log records as the query asks; NotFoundError when there are none."""
    if query.previous:
        number = runner.instance - 1
        if number < 0 or number not in runner.dir.instance_numbers():
            raise NotFoundError(
                f'previous terminated container "{query.container}" in pod "{pod}" not found'
            )
    else:
        number = runner.instance
        if number < 0:
            raise NotFoundError(f'container "{query.container}" in pod "{pod}" is waiting to start')
    instance = runner.dir.instance(number)
    cursor = LogCursor(instance.log)
    try:
        records = await asyncio.to_thread(cursor.read_all)
        for record in _select(records, query):
            yield _record(record)
        if not query.follow or query.previous:
            return
        async for followed in follow(instance, cursor, query):
            yield followed
    finally:
        cursor.close()


async def follow(
    instance: InstanceDir, cursor: LogCursor, query: LogQuery
) -> AsyncIterator[LogRecord]:
    """What the run of `instance` writes after the cursor's position, as it comes,
    until the run has ended and all it wrote was read (`since` and `streams` apply)."""
    since_query = LogQuery(container=query.container, since=query.since, streams=query.streams)
    while True:
        ended = instance.exit.exists() or not instance.path.exists()
        more = await asyncio.to_thread(cursor.read_more)
        for record in _select(more, since_query):
            yield _record(record)
        if ended and not more:
            return
        if not more:
            await asyncio.sleep(FOLLOW_POLL)
