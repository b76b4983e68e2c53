"""`kubectl logs` for ACI: ACI's timestamped log text, --since, --tail and -f polling
that neither repeats nor loses lines (several lines may share a timestamp)."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from vkpy.providers.aci import logs
from vkpy.providers.aci.config import AciConfig
from vkpy.providers.base import LogQuery

T1 = "2026-12-01T10:00:01.000000000Z"
T2 = "2026-12-01T10:00:02.000000000Z"
T3 = "2026-12-01T10:00:03.000000000Z"


class Answer:
    def __init__(self, content: str) -> None:
        self.content = content


class Containers:
    """Stands in for the SDK's `containers` operations: answers scripted log texts."""

    def __init__(self, contents: list[str]) -> None:
        self.contents = contents
        self.calls: list[dict[str, Any]] = []

    async def list_logs(self, rg: str, group: str, container: str, **kwargs: Any) -> Answer:
        self.calls.append(kwargs)
        text = self.contents.pop(0) if len(self.contents) > 1 else self.contents[0]
        lines = text.splitlines(keepends=True)
        tail = kwargs.get("tail")
        return Answer("".join(lines[-tail:] if tail else lines))


class Clients:
    def __init__(self, contents: list[str]) -> None:
        self.aci = type("Aci", (), {})()
        self.aci.containers = Containers(contents)


def source(contents: list[str], running: list[bool]) -> logs.LogSource:
    config = AciConfig.from_dict({"subscription_id": "s", "resource_group": "rg", "region": "r"})
    states = iter(running)
    return logs.LogSource(
        Clients(contents),  # type: ignore[arg-type]
        config,
        "group",
        "app",
        lambda _: next(states, False),
    )


def test_parse_keeps_lines_and_their_times() -> None:
    parsed = logs.parse(f"{T1} one\n{T2} two\ncontinued\n")
    assert [d for _, d in parsed] == [b"one\n", b"two\n", b"continued\n"]
    assert parsed[0][0] == datetime(2026, 12, 1, 10, 0, 1, tzinfo=UTC)
    assert parsed[2][0] == parsed[1][0]


async def test_since_and_tail() -> None:
    text = f"{T1} a\n{T2} b\n{T2} c\n{T3} d\n"
    since = datetime(2026, 12, 1, 10, 0, 2, tzinfo=UTC)
    got = [r.data async for r in logs.read(source([text], []), LogQuery("app", since=since), 0)]
    assert got == [b"b\n", b"c\n", b"d\n"]
    tail = [r.data async for r in logs.read(source([text], []), LogQuery("app", tail_lines=2), 0)]
    assert tail == [b"c\n", b"d\n"]


async def test_follow_emits_each_line_once_even_with_shared_timestamps() -> None:
    polls = [
        f"{T1} a\n{T2} b\n",
        f"{T1} a\n{T2} b\n{T2} c\n",
        f"{T1} a\n{T2} b\n{T2} c\n{T3} d\n",
        f"{T1} a\n{T2} b\n{T2} c\n{T3} d\n{T3} e\n",
    ]
    src = source(polls, [True, True, False])
    got = [r.data async for r in logs.read(src, LogQuery("app", follow=True), 0)]
    assert got == [b"a\n", b"b\n", b"c\n", b"d\n", b"e\n"]
