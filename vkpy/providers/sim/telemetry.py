"""What simulated containers print and consume: deterministic logs and resource usage.

Like the sim's pod states, both are pure functions of a container's run (when that
instance started, when it ends) and the time, so tests can predict every byte:

- Logs: line i of a run is written at `start + i / rate` (rate lines per second,
  1 by default), to stderr when i % 5 == 4 and to stdout otherwise, and reads
  `line <i> of <container> (run <restart>) on <stream>`, padded with dots to
  `width` bytes when a width is set (for big-log benchmarks). A follow keeps
  printing on that clock until the run ends.
- Usage: CPU time grows linearly from 10 ms at start at `cores` cores; memory is
  constant for the container.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime

from vkpy.providers.base import ContainerStats, LogQuery, LogRecord, LogStream

STDERR_EVERY = 5
STARTUP_CPU_SECONDS = 0.01


@dataclass(frozen=True)
class Run:
    """One run of a container: from `start` to `end` (None: no end planned)."""

    start: float
    end: float | None
    restart: int


@dataclass(frozen=True)
class LogShape:
    rate: float = 1.0
    """Lines per second."""
    width: int = 0
    """Pad every line to this many bytes (0: no padding)."""


def stream_of(index: int) -> LogStream:
    return "stderr" if index % STDERR_EVERY == STDERR_EVERY - 1 else "stdout"


def line(container: str, run: Run, index: int, shape: LogShape) -> bytes:
    text = f"line {index} of {container} (run {run.restart}) on {stream_of(index)}"
    if shape.width > len(text) + 1:
        text += "." * (shape.width - len(text) - 1)
    return (text + "\n").encode()


def line_time(run: Run, index: int, shape: LogShape) -> float:
    return run.start + index / shape.rate


def written(run: Run, now: float, shape: LogShape) -> int:
    """How many lines the run has written by `now`."""
    until = now if run.end is None else min(now, run.end)
    if until < run.start:
        return 0
    return math.floor((until - run.start) * shape.rate + 1e-9) + 1


def first_since(run: Run, since: float | None, shape: LogShape) -> int:
    """The first line written at or after `since`."""
    if since is None or since <= run.start:
        return 0
    return math.ceil((since - run.start) * shape.rate - 1e-9)


def _record(container: str, run: Run, index: int, shape: LogShape) -> LogRecord:
    return LogRecord(
        time=datetime.fromtimestamp(line_time(run, index, shape), UTC),
        stream=stream_of(index),
        data=line(container, run, index, shape),
    )


def records(
    container: str, run: Run, shape: LogShape, query: LogQuery, now: float
) -> tuple[Iterator[LogRecord], int]:
    """The lines already written that the query asks for, and the index of the next
    line the run will write."""
    count = written(run, now, shape)
    first = first_since(run, query.since.timestamp() if query.since else None, shape)
    if query.tail_lines is not None:
        first = max(first, count - query.tail_lines)
    return _generate(container, run, shape, query.streams, first, count), count


def _generate(
    container: str, run: Run, shape: LogShape, wanted: frozenset[str], first: int, end: int
) -> Iterator[LogRecord]:
    """`_record` for a range of lines, inlined: big logs are generated at MB/s."""
    start, rate, width = run.start, shape.rate, shape.width
    middle = f" of {container} (run {run.restart}) on "
    at = datetime.fromtimestamp
    for index in range(first, end):
        stream: LogStream = "stderr" if index % STDERR_EVERY == STDERR_EVERY - 1 else "stdout"
        if stream not in wanted:
            continue
        text = f"line {index}{middle}{stream}"
        if width > len(text) + 1:
            text += "." * (width - len(text) - 1)
        yield LogRecord(at(start + index / rate, UTC), stream, (text + "\n").encode())


def next_record(
    container: str, run: Run, shape: LogShape, index: int
) -> tuple[float, LogRecord] | None:
    """When line `index` will be written and the line itself; None after the run."""
    at = line_time(run, index, shape)
    if run.end is not None and at > run.end:
        return None
    return at, _record(container, run, index, shape)


def usage(name: str, run: Run, now: float, cores: float, memory_bytes: int) -> ContainerStats:
    until = now if run.end is None else min(now, run.end)
    return ContainerStats(
        name=name,
        start_time=datetime.fromtimestamp(run.start, UTC),
        cpu_usage_core_seconds=STARTUP_CPU_SECONDS + max(0.0, until - run.start) * cores,
        memory_working_set_bytes=memory_bytes,
        memory_usage_bytes=memory_bytes,
        memory_rss_bytes=memory_bytes,
    )
