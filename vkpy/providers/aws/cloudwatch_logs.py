"""Container logs read from CloudWatch Logs: tail, since, and follow by polling.

Lambda writes a function's output to the log group `/aws/lambda/<function>`, and
ECS's awslogs driver writes each container's output to a stream of a configured
group. Both backends serve `kubectl logs` from there with this module: it pages
through FilterLogEvents, honours `since` and `tail`, and with `follow` keeps asking
for newer events, waiting longer while nothing comes (and briefly again once
something does), until the caller's `ended` says the container is gone or the
reader is closed. CloudWatch does not tell stdout from stderr: every line is stdout.
"""

from __future__ import annotations

import collections
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime

from vkpy.core.clock import SYSTEM_CLOCK, Clock
from vkpy.providers.aws.clients import AwsClients, AwsObject
from vkpy.providers.aws.retry import not_found
from vkpy.providers.base import LogQuery, LogRecord
from vkpy.providers.errors import ProviderError

MAX_STREAM_NAMES = 100
"""FilterLogEvents takes at most this many stream names."""


@dataclass(frozen=True)
class LogSource:
    """Where a container's lines are: a group, and exact streams or a stream prefix."""

    group: str
    streams: tuple[str, ...] = ()
    stream_prefix: str | None = None


@dataclass(frozen=True)
class FollowPolicy:
    """How often `follow` asks for new events."""

    initial: float = 0.5
    """Wait after new events arrived."""
    maximum: float = 5.0
    """Longest wait while nothing arrives (each empty poll doubles the wait)."""


Ended = Callable[[], Awaitable[bool]]


async def _events(clients: AwsClients, source: LogSource, start_ms: int) -> list[AwsObject]:
    """Every event of `source` from `start_ms` on, ordered by time."""
    params: dict[str, object] = {"logGroupName": source.group, "startTime": start_ms}
    if source.streams:
        params["logStreamNames"] = list(source.streams[:MAX_STREAM_NAMES])
    elif source.stream_prefix:
        params["logStreamNamePrefix"] = source.stream_prefix
    events: list[AwsObject] = []
    token: str | None = None
    while True:
        page_params = dict(params)
        if token:
            page_params["nextToken"] = token
        try:
            page = await clients.call("logs", "filter_log_events", **page_params)
        except ProviderError as error:
            if not_found(error):
                return []  # the group or stream does not exist (yet): no lines
            raise
        events.extend(page.get("events") or [])
        next_token = page.get("nextToken")
        if not next_token or next_token == token:
            break
        token = str(next_token)
    events.sort(key=lambda e: (int(e.get("timestamp") or 0), str(e.get("eventId") or "")))
    return events


def _record(event: AwsObject) -> LogRecord:
    message = str(event.get("message") or "")
    if not message.endswith("\n"):
        message += "\n"
    when = datetime.fromtimestamp(int(event.get("timestamp") or 0) / 1000, UTC)
    return LogRecord(time=when, stream="stdout", data=message.encode())


async def read_logs(
    clients: AwsClients,
    source: LogSource,
    query: LogQuery,
    *,
    ended: Ended | None = None,
    follow_policy: FollowPolicy | None = None,
    clock: Clock = SYSTEM_CLOCK,
) -> AsyncIterator[LogRecord]:
    """The lines of `source` as `query` asks; see the module docstring."""
    if "stdout" not in query.streams:
        return
    policy = follow_policy or FollowPolicy()
    start_ms = int(query.since.timestamp() * 1000) if query.since else 0
    events = await _events(clients, source, start_ms)
    if query.tail_lines is not None:
        events = list(collections.deque(events, maxlen=max(0, query.tail_lines)))
    last_ms = start_ms
    seen: set[str] = set()
    for event in events:
        yield _record(event)
    if events:
        last_ms, seen = _position(events, start_ms, seen)
    if not query.follow:
        return
    wait = policy.initial
    finishing = False
    while True:
        await clock.sleep(wait)
        if not finishing and ended is not None and await ended():
            finishing = True  # one last read for lines written before the end
        fresh = [
            e
            for e in await _events(clients, source, last_ms)
            if str(e.get("eventId") or "") not in seen
        ]
        for event in fresh:
            yield _record(event)
        if fresh:
            last_ms, seen = _position(fresh, last_ms, seen)
            wait = policy.initial
        else:
            wait = min(policy.maximum, wait * 2)
        if finishing:
            return


def _position(events: Sequence[AwsObject], last_ms: int, seen: set[str]) -> tuple[int, set[str]]:
    """Where the next poll starts, and the ids already given at that millisecond."""
    newest = max(int(e.get("timestamp") or 0) for e in events)
    at_newest = {
        str(e.get("eventId") or "") for e in events if int(e.get("timestamp") or 0) == newest
    }
    if newest == last_ms:
        return newest, seen | at_newest
    return newest, at_newest
