"""List+watch: resume from the newest resourceVersion, relist on 410 Gone, skip bookmarks."""

import asyncio
import json
from collections.abc import AsyncIterator
from typing import Any

import pytest

from tests.unit.fake_clock import NoWaitClock
from vkpy.kube.client import ApiError
from vkpy.kube.watch import Watcher, WatchOptions


def pod(name: str, rv: str) -> dict[str, Any]:
    return {"metadata": {"name": name, "uid": name, "resourceVersion": rv}}


class FakeApi:
    """Serves scripted list and watch answers and records the watch queries."""

    def __init__(self, lists: list[dict[str, Any]], watches: list[list[dict[str, Any]] | ApiError]):
        self.lists = lists
        self.watches = watches
        self.watch_queries: list[dict[str, Any]] = []
        self.list_queries: list[dict[str, Any]] = []

    async def get(self, path: str, query: dict[str, str] | None = None) -> dict[str, Any]:
        self.list_queries.append(dict(query or {}))
        return self.lists.pop(0)

    async def stream_lines(
        self, path: str, query: dict[str, Any], timeout: float
    ) -> AsyncIterator[bytes]:
        self.watch_queries.append(dict(query))
        if not self.watches:
            await asyncio.Event().wait()  # a watch that stays open
        script = self.watches.pop(0)
        if isinstance(script, ApiError):
            raise script
        for event in script:
            yield json.dumps(event).encode() + b"\n"


class Recorder:
    def __init__(self) -> None:
        self.seen: list[tuple[str, str]] = []

    def replace(self, items: list[dict[str, Any]]) -> None:
        self.seen.append(("LIST", ",".join(i["metadata"]["name"] for i in items)))

    def apply(self, event_type: str, obj: dict[str, Any]) -> None:
        self.seen.append((event_type, obj["metadata"]["name"]))


async def run_until(watcher: Watcher, api: FakeApi, watches: int) -> None:
    task = asyncio.create_task(watcher.run())
    while len(api.watch_queries) < watches:
        await asyncio.sleep(0.001)
    await asyncio.sleep(0.01)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task


async def test_resumes_from_newest_version_and_ignores_bookmarks() -> None:
    api = FakeApi(
        [{"metadata": {"resourceVersion": "10"}, "items": [pod("a", "9")]}],
        [
            [
                {"type": "ADDED", "object": pod("b", "11")},
                {"type": "BOOKMARK", "object": {"metadata": {"resourceVersion": "15"}}},
            ],
        ],
    )
    recorder = Recorder()
    watcher = Watcher(api, WatchOptions(path="/api/v1/pods"), recorder, clock=NoWaitClock())  # type: ignore[arg-type]
    await run_until(watcher, api, watches=2)
    assert recorder.seen == [("LIST", "a"), ("ADDED", "b")]
    assert [q["resourceVersion"] for q in api.watch_queries] == ["10", "15"]
    assert api.watch_queries[0]["allowWatchBookmarks"] is True
    assert watcher.synced.is_set()


async def test_relists_when_the_version_is_gone() -> None:
    api = FakeApi(
        [
            {"metadata": {"resourceVersion": "10"}, "items": [pod("a", "9")]},
            {"metadata": {"resourceVersion": "50"}, "items": [pod("c", "49")]},
        ],
        [[{"type": "ERROR", "object": {"kind": "Status", "code": 410, "reason": "Expired"}}]],
    )
    recorder = Recorder()
    watcher = Watcher(api, WatchOptions(path="/api/v1/pods"), recorder, clock=NoWaitClock())  # type: ignore[arg-type]
    await run_until(watcher, api, watches=2)
    assert recorder.seen == [("LIST", "a"), ("LIST", "c")]
    assert [q["resourceVersion"] for q in api.watch_queries] == ["10", "50"]


async def test_changes_only_lists_one_item_for_its_version_and_hands_over_none() -> None:
    """A node set's Nodes: the whole list is large and not wanted, only what changes
    from now on; a relist (410) hands over an empty list again, which tells the
    handler it may have missed changes."""
    api = FakeApi(
        [
            {"metadata": {"resourceVersion": "10"}, "items": [pod("a", "9")]},
            {"metadata": {"resourceVersion": "50"}, "items": [pod("c", "49")]},
        ],
        [
            [
                {"type": "MODIFIED", "object": pod("a", "12")},
                {"type": "ERROR", "object": {"kind": "Status", "code": 410, "reason": "Expired"}},
            ],
        ],
    )
    recorder = Recorder()
    options = WatchOptions(path="/api/v1/nodes", changes_only=True, stream_initial=True)
    watcher = Watcher(api, options, recorder, clock=NoWaitClock())  # type: ignore[arg-type]
    await run_until(watcher, api, watches=2)
    assert recorder.seen == [("LIST", ""), ("MODIFIED", "a"), ("LIST", "")]
    assert [q.get("limit") for q in api.list_queries] == ["1", "1"]
    assert [q["resourceVersion"] for q in api.watch_queries] == ["10", "50"]
    assert "sendInitialEvents" not in api.watch_queries[0]


async def test_reconnects_after_errors_from_the_same_version() -> None:
    api = FakeApi(
        [{"metadata": {"resourceVersion": "10"}, "items": []}],
        [
            ApiError(0, "Unreachable", "connection reset"),
            [{"type": "ADDED", "object": pod("d", "12")}],
        ],
    )
    recorder = Recorder()
    clock = NoWaitClock()
    delays = clock.delays
    watcher = Watcher(api, WatchOptions(path="/api/v1/pods"), recorder, clock=clock)  # type: ignore[arg-type]
    await run_until(watcher, api, watches=3)
    assert recorder.seen == [("LIST", ""), ("ADDED", "d")]
    assert [q["resourceVersion"] for q in api.watch_queries] == ["10", "10", "12"]
    assert len(delays) == 1 and delays[0] > 0


def end_of_initial(rv: str) -> dict[str, Any]:
    annotations = {"k8s.io/initial-events-end": "true"}
    return {
        "type": "BOOKMARK",
        "object": {"metadata": {"resourceVersion": rv, "annotations": annotations}},
    }


STREAMING = WatchOptions(path="/api/v1/pods", stream_initial=True)


async def test_the_first_state_comes_from_a_streaming_list_without_a_list() -> None:
    api = FakeApi(
        [],  # a LIST would fail: there is none to give
        [
            [
                {"type": "ADDED", "object": pod("a", "7")},
                {"type": "ADDED", "object": pod("b", "8")},
                end_of_initial("9"),
                {"type": "MODIFIED", "object": pod("a", "10")},
                {"type": "ADDED", "object": pod("c", "11")},
            ],
        ],
    )
    recorder = Recorder()
    watcher = Watcher(api, STREAMING, recorder, clock=NoWaitClock())  # type: ignore[arg-type]
    await run_until(watcher, api, watches=2)
    assert recorder.seen == [("LIST", "a,b"), ("MODIFIED", "a"), ("ADDED", "c")]
    assert watcher.synced.is_set()
    first, resumed = api.watch_queries
    assert first["sendInitialEvents"] is True
    assert first["resourceVersionMatch"] == "NotOlderThan"
    assert "resourceVersion" not in first
    assert resumed["resourceVersion"] == "11"  # then an ordinary resumed watch
    assert "sendInitialEvents" not in resumed


async def test_the_client_go_feature_variable_turns_streaming_lists_off(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("KUBE_FEATURE_WatchListClient", "false")
    api = FakeApi(
        [{"metadata": {"resourceVersion": "10"}, "items": [pod("a", "9")]}],
        [[{"type": "ADDED", "object": pod("b", "11")}]],
    )
    recorder = Recorder()
    watcher = Watcher(api, STREAMING, recorder, clock=NoWaitClock())  # type: ignore[arg-type]
    await run_until(watcher, api, watches=2)
    assert recorder.seen == [("LIST", "a"), ("ADDED", "b")]
    assert [q.get("sendInitialEvents") for q in api.watch_queries] == [None, None]


async def test_a_stream_cut_before_the_initial_state_is_whole_starts_over() -> None:
    api = FakeApi(
        [],
        [
            [{"type": "ADDED", "object": pod("a", "7")}],  # cut: no end bookmark
            [
                {"type": "ADDED", "object": pod("a", "7")},
                {"type": "ADDED", "object": pod("b", "8")},
                end_of_initial("9"),
            ],
        ],
    )
    recorder = Recorder()
    watcher = Watcher(api, STREAMING, recorder, clock=NoWaitClock())  # type: ignore[arg-type]
    await run_until(watcher, api, watches=3)
    assert recorder.seen == [("LIST", "a,b")]  # nothing half-seen was handed over
    assert [q.get("sendInitialEvents") for q in api.watch_queries] == [True, True, None]


async def test_a_server_that_refuses_streaming_lists_gets_a_list() -> None:
    refused = ApiError(422, "Invalid", "sendInitialEvents is forbidden for watch")
    api = FakeApi(
        [{"metadata": {"resourceVersion": "10"}, "items": [pod("a", "9")]}],
        [refused, [{"type": "ADDED", "object": pod("b", "11")}]],
    )
    recorder = Recorder()
    watcher = Watcher(api, STREAMING, recorder, clock=NoWaitClock())  # type: ignore[arg-type]
    await run_until(watcher, api, watches=3)
    assert recorder.seen == [("LIST", "a"), ("ADDED", "b")]
    assert [q.get("sendInitialEvents") for q in api.watch_queries] == [True, None, None]


async def test_a_server_that_ignores_streaming_lists_gets_a_list() -> None:
    """An old server takes the watch but sends no end of the initial events."""
    api = FakeApi(
        [{"metadata": {"resourceVersion": "10"}, "items": [pod("a", "9")]}],
        [[{"type": "ADDED", "object": pod("a", "9")}]],
    )

    async def quiet_then_open(
        path: str, query: dict[str, Any], timeout: float
    ) -> AsyncIterator[bytes]:
        api.watch_queries.append(dict(query))
        if query.get("sendInitialEvents"):
            yield json.dumps({"type": "ADDED", "object": pod("a", "9")}).encode()
        await asyncio.Event().wait()

    api.stream_lines = quiet_then_open  # type: ignore[method-assign]
    recorder = Recorder()
    options = WatchOptions(path="/api/v1/pods", stream_initial=True, initial_quiet=0.2)
    watcher = Watcher(api, options, recorder, clock=NoWaitClock())  # type: ignore[arg-type]
    await run_until(watcher, api, watches=2)
    assert recorder.seen == [("LIST", "a")]
    assert [q.get("sendInitialEvents") for q in api.watch_queries] == [True, None]
