"""The pod watch survives whatever a watch stream can carry (issue 11, defect 11).

A local aiohttp server on 127.0.0.1 plays the API server: it answers the list, then
serves each watch request from a script of raw bytes, so the real client
(`KubeClient.stream_lines` over aiohttp) and the real `Watcher` read exactly what a
broken or unusual stream would carry. After each fault the watch must go on: the
events that follow are delivered, resumed from the last good resourceVersion, and
the watch task is still running.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

import pytest
from aiohttp import web

from tests.unit.fake_clock import NoWaitClock
from vkpy.kube.access import Access
from vkpy.kube.client import ClientOptions, KubeClient
from vkpy.kube.watch import Watcher, WatchOptions

CUT = object()
"""In a script: drop the connection right here (no chunk terminator, no newline)."""


def pod(name: str, rv: str, **annotations: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "uid": f"uid-{name}",
            "resourceVersion": rv,
            "annotations": annotations,
        },
    }


def line(event_type: str, obj: Any) -> bytes:
    return json.dumps({"type": event_type, "object": obj}).encode() + b"\n"


@dataclass
class FakeApiServer:
    """Serves one list, then one scripted watch stream per watch request."""

    list_rv: str = "10"
    watches: list[list[bytes | object]] = field(default_factory=list)
    watch_versions: list[str] = field(default_factory=list)
    lists: int = 0

    async def pods(self, request: web.Request) -> web.StreamResponse:
        if request.query.get("watch") != "true":
            self.lists += 1
            return web.json_response(
                {"kind": "PodList", "metadata": {"resourceVersion": self.list_rv}, "items": []}
            )
        self.watch_versions.append(request.query.get("resourceVersion", ""))
        response = web.StreamResponse()
        response.content_type = "application/json"
        response.enable_chunked_encoding()
        await response.prepare(request)
        if not self.watches:
            await asyncio.Event().wait()  # an idle watch, open until the client leaves
        for part in self.watches.pop(0):
            if part is CUT:
                assert request.transport is not None
                request.transport.abort()
                return response
            assert isinstance(part, bytes)
            # in pieces, as a network delivers a big line
            for start in range(0, len(part), 65536):
                await response.write(part[start : start + 65536])
        await response.write_eof()
        return response


class Recorder:
    def __init__(self) -> None:
        self.seen: list[tuple[str, str]] = []
        self.objects: dict[str, dict[str, Any]] = {}

    def replace(self, items: list[dict[str, Any]]) -> None:
        self.seen.append(("LIST", ",".join(i["metadata"]["name"] for i in items)))

    def apply(self, event_type: str, obj: dict[str, Any]) -> None:
        self.seen.append((event_type, obj["metadata"]["name"]))
        self.objects[obj["metadata"]["name"]] = obj


@pytest.fixture
async def api() -> AsyncIterator[tuple[FakeApiServer, KubeClient]]:
    server = FakeApiServer()
    app = web.Application()
    app.router.add_get("/api/v1/pods", server.pods)
    runner = web.AppRunner(app, handler_cancellation=True, shutdown_timeout=1)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    client = KubeClient.open(Access(f"http://127.0.0.1:{port}", None), ClientOptions())
    try:
        yield server, client
    finally:
        await client.close()
        await runner.cleanup()


async def watch_until(
    server: FakeApiServer, client: KubeClient, recorder: Recorder, wanted: tuple[str, str]
) -> asyncio.Task[None]:
    """Run the watch until `wanted` was delivered; the task is returned still running."""
    watcher = Watcher(client, WatchOptions(path="/api/v1/pods"), recorder, clock=NoWaitClock())
    task = asyncio.create_task(watcher.run())
    try:
        async with asyncio.timeout(10):
            while wanted not in recorder.seen:
                assert not task.done(), f"the watch stopped: {task.exception()!r}"
                await asyncio.sleep(0.005)
        assert not task.done()
    finally:
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
    return task


@pytest.mark.parametrize("text", ["x", "<"], ids=["plain", "html-escaped"])
async def test_a_pod_near_the_etcd_size_limit_is_delivered_whole(
    api: tuple[FakeApiServer, KubeClient], text: str
) -> None:
    """1.4 MB of annotation fits etcd's 1.5 MB; the API server's JSON escapes <, > and &
    as \\u003c (six bytes each), so the same pod can be an 8.4 MB watch line."""
    server, client = api
    big = text * 1_400_000
    encoded = line("ADDED", pod("big", "11", blob=big)).replace(b"<", b"\\u003c")
    server.watches = [[encoded, line("ADDED", pod("b", "12"))]]
    recorder = Recorder()
    await watch_until(server, client, recorder, ("ADDED", "b"))
    assert recorder.seen == [("LIST", ""), ("ADDED", "big"), ("ADDED", "b")]
    assert recorder.objects["big"]["metadata"]["annotations"]["blob"] == big


@pytest.mark.parametrize(
    "bad",
    [
        b'{"type":"ADDED","object":{"metadata":{"name":"tru\n',
        b"not json at all\n",
        b'["a","list"]\n',
        b'{"type":"ADDED","object":"a string"}\n',
        b'{"type":"ADDED"}\n',
        b'{"type":"MODIFIED","object":{"metadata":"oops"}}\n',
    ],
    ids=["truncated", "not-json", "not-an-object", "object-not-a-dict", "no-object", "bad-meta"],
)
async def test_a_malformed_line_resumes_from_the_last_good_version(
    api: tuple[FakeApiServer, KubeClient], bad: bytes
) -> None:
    server, client = api
    server.watches = [
        [line("ADDED", pod("a", "11")), bad, line("ADDED", pod("never", "13"))],
        [line("MODIFIED", pod("a", "14"))],
    ]
    recorder = Recorder()
    await watch_until(server, client, recorder, ("MODIFIED", "a"))
    assert ("ADDED", "never") not in recorder.seen  # nothing after a bad line is trusted
    assert recorder.seen == [("LIST", ""), ("ADDED", "a"), ("MODIFIED", "a")]
    assert server.watch_versions[:2] == ["10", "11"]
    assert server.lists == 1


@pytest.mark.parametrize(
    "status",
    [
        {"kind": "Status", "code": 500, "reason": "InternalError", "message": "etcd hiccup"},
        {"kind": "Status", "code": 429, "reason": "TooManyRequests"},
        {"kind": "Status", "code": 403, "reason": "Forbidden"},
        {"kind": "Status", "code": 404, "reason": "NotFound"},
        {"kind": "Status", "code": 0},
        {"kind": "Status", "code": "weird"},
        {"kind": "Status"},
        "not even a status",
    ],
    ids=["500", "429", "403", "404", "zero", "non-numeric", "no-code", "not-a-dict"],
)
async def test_an_error_event_of_any_code_restarts_the_watch(
    api: tuple[FakeApiServer, KubeClient], status: Any
) -> None:
    server, client = api
    server.watches = [
        [line("ADDED", pod("a", "11")), line("ERROR", status)],
        [line("ADDED", pod("b", "12"))],
    ]
    recorder = Recorder()
    await watch_until(server, client, recorder, ("ADDED", "b"))
    assert recorder.seen == [("LIST", ""), ("ADDED", "a"), ("ADDED", "b")]
    assert server.watch_versions[:2] == ["10", "11"]


async def test_an_expired_error_event_relists(api: tuple[FakeApiServer, KubeClient]) -> None:
    server, client = api
    server.watches = [
        [line("ERROR", {"kind": "Status", "code": 410, "reason": "Expired"})],
        [line("ADDED", pod("b", "12"))],
    ]
    recorder = Recorder()
    await watch_until(server, client, recorder, ("ADDED", "b"))
    assert server.lists == 2
    assert recorder.seen == [("LIST", ""), ("LIST", ""), ("ADDED", "b")]


async def test_a_connection_cut_mid_line_resumes_from_the_last_good_version(
    api: tuple[FakeApiServer, KubeClient],
) -> None:
    server, client = api
    server.watches = [
        [line("ADDED", pod("a", "11")), b'{"type":"ADDED","object":{"metad', CUT],
        [line("ADDED", pod("b", "12"))],
    ]
    recorder = Recorder()
    await watch_until(server, client, recorder, ("ADDED", "b"))
    assert recorder.seen == [("LIST", ""), ("ADDED", "a"), ("ADDED", "b")]
    assert server.watch_versions[:2] == ["10", "11"]


async def test_a_stream_ending_without_a_final_newline_is_not_trusted(
    api: tuple[FakeApiServer, KubeClient],
) -> None:
    server, client = api
    server.watches = [
        [line("ADDED", pod("a", "11")), line("ADDED", pod("half", "12")).rstrip(b"\n")],
        [line("ADDED", pod("b", "13"))],
    ]
    recorder = Recorder()
    await watch_until(server, client, recorder, ("ADDED", "b"))
    assert ("ADDED", "half") not in recorder.seen
    assert server.watch_versions[:2] == ["10", "11"]


async def test_an_unknown_event_type_is_skipped(api: tuple[FakeApiServer, KubeClient]) -> None:
    server, client = api
    server.watches = [[line("SOMETHING_NEW", pod("x", "11")), line("ADDED", pod("b", "12"))]]
    recorder = Recorder()
    await watch_until(server, client, recorder, ("ADDED", "b"))
    assert recorder.seen == [("LIST", ""), ("ADDED", "b")]


async def test_a_handler_that_fails_once_is_given_a_fresh_list(
    api: tuple[FakeApiServer, KubeClient],
) -> None:
    server, client = api
    server.watches = [[line("ADDED", pod("boom", "11"))], [line("ADDED", pod("b", "12"))]]

    class Flaky(Recorder):
        def apply(self, event_type: str, obj: dict[str, Any]) -> None:
            if obj["metadata"]["name"] == "boom":
                raise KeyError("a bug in the handler")
            super().apply(event_type, obj)

    recorder = Flaky()
    await watch_until(server, client, recorder, ("ADDED", "b"))
    assert recorder.seen == [("LIST", ""), ("LIST", ""), ("ADDED", "b")]
    assert server.lists == 2


async def test_the_back_off_starts_over_once_a_watch_has_worked(
    api: tuple[FakeApiServer, KubeClient],
) -> None:
    """After an outage the watch reconnects and runs for minutes; the next outage must
    not begin where the last one's back-off ended (seen: 34 s before the first retry
    of a 5 s outage, because only a watch the server closed reset the count)."""
    server, client = api
    server.watches = [
        [CUT],
        [CUT],
        [CUT],
        [line("ADDED", pod("a", "11")), CUT],
        [CUT],
        [line("ADDED", pod("b", "12"))],
    ]
    clock = NoWaitClock()
    delays = clock.delays
    recorder = Recorder()
    options = WatchOptions(path="/api/v1/pods", max_backoff=3.0)
    watcher = Watcher(client, options, recorder, clock=clock)
    task = asyncio.create_task(watcher.run())
    try:
        async with asyncio.timeout(10):
            while ("ADDED", "b") not in recorder.seen:
                await asyncio.sleep(0.005)
    finally:
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
    assert len(delays) == 5
    assert delays[0] < delays[1] < delays[2]
    assert delays[3] <= 1.2, f"the back-off did not start over: {delays}"
    assert all(d <= 3.0 for d in delays), f"the cap is a cap, jitter included: {delays}"
