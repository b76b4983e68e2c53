"""`kubectl logs` for ACI containers: tail, since, timestamps and follow.

ACI's logs API answers the current instance's output of one container, optionally
the last N lines and with a timestamp at the start of each line; it has no "since"
and no streaming. So every line is read with its timestamp: `--since` filters on
it, `--timestamps` (applied by the kubelet side) shows it, and `-f` polls the API
every `log_poll_interval`, emitting only lines newer than the last one emitted (lines
sharing that timestamp are counted, so none repeats and none is lost) until the
container stops. ACI merges stdout and stderr: all lines are reported as stdout.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from datetime import datetime

from vkpy.core.rfc3339 import parse_or_none
from vkpy.providers.aci.clients import AzureClients, provider_error
from vkpy.providers.aci.config import AciConfig
from vkpy.providers.base import LogQuery, LogRecord

FOLLOW_WINDOW = 5000
"""Lines read per poll while following (the newest ones)."""


@dataclass(frozen=True)
class LogSource:
    clients: AzureClients
    config: AciConfig
    group: str
    container: str
    running: Callable[[str], bool]


def parse(content: str) -> list[tuple[datetime | None, bytes]]:
    """ACI's timestamped log text as (time, line) pairs; a line without a stamp
    (a continuation) takes the previous line's time."""
    out: list[tuple[datetime | None, bytes]] = []
    last: datetime | None = None
    for line in content.splitlines(keepends=True):
        stamp, _, rest = line.partition(" ")
        moment = parse_or_none(stamp)
        if moment is None:
            out.append((last, line.encode()))
            continue
        last = moment
        out.append((moment, rest.encode()))
    return out


async def fetch(source: LogSource, tail: int | None) -> list[tuple[datetime | None, bytes]]:
    try:
        answer = await source.clients.aci.containers.list_logs(
            source.config.resource_group,
            source.group,
            source.container,
            tail=tail,
            timestamps=True,
        )
    except Exception as error:
        raise provider_error(error, f"reading logs of {source.group}/{source.container}") from error
    return parse(answer.content or "")


def _record(moment: datetime | None, data: bytes, fallback: datetime) -> LogRecord:
    return LogRecord(time=moment or fallback, stream="stdout", data=data)


async def read(source: LogSource, query: LogQuery, interval: float) -> AsyncIterator[LogRecord]:
    if "stdout" not in query.streams:
        return
    tail = query.tail_lines if query.since is None else None
    lines = await fetch(source, tail)
    if query.since is not None:
        since = query.since
        lines = [(t, d) for t, d in lines if t is None or t >= since]
        if query.tail_lines is not None:
            lines = lines[-query.tail_lines :] if query.tail_lines > 0 else []
    fallback = datetime.fromtimestamp(0).astimezone()
    last: datetime | None = None
    at_last = 0
    for moment, data in lines:
        if moment is not None:
            at_last = at_last + 1 if moment == last else 1
            last = moment
        yield _record(moment, data, fallback)
    if not query.follow:
        return
    while True:
        ended = not source.running(source.container)
        if not ended:
            await asyncio.sleep(interval)
        lines = await fetch(source, FOLLOW_WINDOW)
        seen_at_last = 0
        for moment, data in lines:
            if moment is None or (last is not None and moment < last):
                continue
            if last is not None and moment == last:
                seen_at_last += 1
                if seen_at_last <= at_last:
                    continue
                at_last += 1
            else:
                last, at_last = moment, 1
                seen_at_last = 1
            yield _record(moment, data, fallback)
        if ended:
            return
