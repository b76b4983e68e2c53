"""Container logs from CloudWatch Logs: paging, since, tail, follow with back-off."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from vkpy.core.clock import SystemClock
from vkpy.providers.aws.cloudwatch_logs import FollowPolicy, LogSource, read_logs
from vkpy.providers.aws.retry import AwsApiError
from vkpy.providers.base import LogQuery


class FakeLogs:
    """FilterLogEvents over an in-memory group, two events per page."""

    def __init__(self) -> None:
        self.events: list[dict[str, Any]] = []
        self.missing = False
        self.calls: list[dict[str, Any]] = []

    def add(self, ms: int, message: str) -> None:
        self.events.append({"timestamp": ms, "message": message, "eventId": f"{ms}-{message}"})

    async def call(self, service: str, operation: str, **params: Any) -> dict[str, Any]:
        assert (service, operation) == ("logs", "filter_log_events")
        self.calls.append(params)
        if self.missing:
            raise AwsApiError("gone", code="ResourceNotFoundException", status=400, operation="x")
        matching = [e for e in self.events if e["timestamp"] >= params["startTime"]]
        start = int(params.get("nextToken") or 0)
        page = matching[start : start + 2]
        answer: dict[str, Any] = {"events": page}
        if start + 2 < len(matching):
            answer["nextToken"] = str(start + 2)
        return answer


SOURCE = LogSource(group="/aws/lambda/f")


async def collect(logs: FakeLogs, query: LogQuery, **kwargs: Any) -> list[bytes]:
    return [r.data async for r in read_logs(logs, SOURCE, query, **kwargs)]  # type: ignore[arg-type]


async def test_pages_since_and_tail() -> None:
    logs = FakeLogs()
    for i in range(5):
        logs.add(1000 * (i + 1), f"line {i}")
    assert await collect(logs, LogQuery("app")) == [f"line {i}\n".encode() for i in range(5)]
    since = datetime.fromtimestamp(3, UTC)
    assert await collect(logs, LogQuery("app", since=since)) == [
        b"line 2\n",
        b"line 3\n",
        b"line 4\n",
    ]
    assert await collect(logs, LogQuery("app", tail_lines=2)) == [b"line 3\n", b"line 4\n"]
    assert await collect(logs, LogQuery("app", tail_lines=0)) == []
    assert await collect(logs, LogQuery("app", streams=frozenset({"stderr"}))) == []


async def test_a_missing_group_has_no_lines() -> None:
    logs = FakeLogs()
    logs.missing = True
    assert await collect(logs, LogQuery("app")) == []


async def test_follow_polls_with_backoff_and_ends_after_the_container() -> None:
    logs = FakeLogs()
    logs.add(1000, "first")
    waits: list[float] = []
    ended = {"now": False}

    class Script(SystemClock):
        """Each wait the logs are followed with: what the group holds changes on cue."""

        async def sleep(self, seconds: float) -> None:
            waits.append(seconds)
            if len(waits) == 3:
                logs.add(1000, "same millisecond")  # not lost, not repeated
                logs.add(2000, "second")
            if len(waits) == 5:
                ended["now"] = True
                logs.add(3000, "last words")

    async def is_ended() -> bool:
        return ended["now"]

    lines = await collect(
        logs,
        LogQuery("app", follow=True),
        ended=is_ended,
        follow_policy=FollowPolicy(initial=0.5, maximum=2.0),
        clock=Script(),
    )
    assert lines == [b"first\n", b"same millisecond\n", b"second\n", b"last words\n"]
    assert waits == [0.5, 1.0, 2.0, 0.5, 1.0]
