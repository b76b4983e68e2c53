"""Reading a container's log files for `kubectl logs`: previous, since, tail, follow.

The supervisor writes CRI-format lines (logfile.py); this turns them back into
`LogRecord`s for the kubelet API. The current run's files are read, or with
`previous` the run before it; records are filtered by stream and time and the last
`tail_lines` kept. With `follow`, the current file is then polled for new lines,
across rotations (the old file is drained before the new one is opened), until the
run has ended and everything it wrote was read. File reads happen in a thread, at
most `BATCH` bytes at a time: a container that printed a lot costs vkpy a batch and
the lines asked for (the tail), never its whole log.
"""

from __future__ import annotations

import asyncio
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
BATCH = 256 * 1024
"""Bytes of log read (and parsed) at once."""


class LogCursor:
    """Reads one log file (and its rotations) from the start, then as it grows."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._fd: int | None = None
        self._pending = b""
        self._mid_record = False
        """Positioned inside a record (`skip_to_end`): its rest is not a record."""
        self._rotated: list[Path] | None = None
        """Rotated files `read_batch` has still to read (None: not listed yet)."""
        self._old_fd: int | None = None

    def close(self) -> None:
        for fd in (self._fd, self._old_fd):
            if fd is not None:
                os.close(fd)
        self._fd = self._old_fd = None

    def _parse(self, data: bytes) -> list[Record]:
        data = self._pending + data
        lines = data.split(b"\n")
        self._pending = lines.pop()
        if self._mid_record and lines:
            lines.pop(0)
            self._mid_record = False
        return [r for line in lines if (r := parse_record(line)) is not None]

    def read_batch(self) -> list[Record] | None:
        """The next records of what was written so far, oldest first (rotated files,
        then the current one), from at most BATCH bytes; None once all of it was read
        (the cursor is then at the end of the current file, ready for `read_more`)."""
        if self._rotated is None:
            self._rotated = log_files(self.path)[:-1]
        while self._rotated:
            if self._old_fd is None:
                try:
                    self._old_fd = os.open(self._rotated[0], os.O_RDONLY)
                except FileNotFoundError:
                    self._rotated.pop(0)  # rotated away meanwhile
                    continue
                self._pending = b""
            data = os.read(self._old_fd, BATCH)
            if data:
                return self._parse(data)
            os.close(self._old_fd)
            self._old_fd = None
            self._rotated.pop(0)
        if self._fd is None:
            try:
                self._fd = os.open(self.path, os.O_RDONLY)
            except FileNotFoundError:
                return None
            self._pending = b""
        data = os.read(self._fd, BATCH)
        return self._parse(data) if data else None

    def skip_to_end(self) -> None:
        """Start after everything written so far, reading nothing of it: `read_more`
        then returns only what is written from now on (attach). Cheap enough for the
        event loop: an open and a seek, so the position is fixed before the caller
        does anything that could make the container write."""
        self._rotated = []
        try:
            self._fd = os.open(self.path, os.O_RDONLY)
        except FileNotFoundError:
            return  # nothing written yet: read_more opens it and reads from its start
        end = os.lseek(self._fd, 0, os.SEEK_END)
        if end > 0:
            self._mid_record = os.pread(self._fd, 1, end - 1) != b"\n"

    def read_more(self) -> list[Record]:
        """Records written since the last read (from at most BATCH bytes; call again
        while it returns some), following a rotation."""
        if self._fd is None:
            try:
                self._fd = os.open(self.path, os.O_RDONLY)
            except FileNotFoundError:
                return []
        data = os.read(self._fd, BATCH)
        if len(data) == BATCH:
            return self._parse(data)
        try:
            rotated = os.stat(self.path).st_ino != os.fstat(self._fd).st_ino
        except FileNotFoundError:
            rotated = True
        if rotated:
            # What was written between the read above and the rename: a few records.
            while chunk := os.read(self._fd, BATCH):
                data += chunk
        records = self._parse(data)
        if rotated:
            os.close(self._fd)
            self._fd = None
            self._pending = b""
            self._mid_record = False
        return records


def _wanted(records: Iterable[Record], query: LogQuery) -> Iterable[Record]:
    since = None if query.since is None else int(query.since.timestamp() * 1e9)
    streams = query.streams
    return (r for r in records if r.stream in streams and (since is None or r.ns >= since))


def _tail(cursor: LogCursor, query: LogQuery) -> list[Record]:
    """The last `query.tail_lines` wanted records of what was written so far."""
    kept: deque[Record] = deque(maxlen=max(0, query.tail_lines or 0))
    while (batch := cursor.read_batch()) is not None:
        kept.extend(_wanted(batch, query))
    return list(kept)


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
        if query.tail_lines is not None and query.tail_lines <= 0:
            cursor.skip_to_end()
        elif query.tail_lines is not None:
            for record in await asyncio.to_thread(_tail, cursor, query):
                yield _record(record)
        else:
            while (batch := await asyncio.to_thread(cursor.read_batch)) is not None:
                for record in _wanted(batch, query):
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
    while True:
        ended = instance.exit.exists() or not instance.path.exists()
        more = await asyncio.to_thread(cursor.read_more)
        for record in _wanted(more, query):
            yield _record(record)
        if ended and not more:
            return
        if not more:
            await asyncio.sleep(FOLLOW_POLL)
