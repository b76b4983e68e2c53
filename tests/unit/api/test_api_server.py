"""The kubelet API server in-process, over real TLS, with a scripted backend: log
streaming (coalescing, flushing, limits, closing the backend's stream), error
mapping, authentication in front of every route, bad input, /pods and /metrics.

The full path through the real API server and kubectl is in
tests/integration/test_kubelet_api.py; here the backend's behaviour can be scripted
exactly (a stream that blocks, fails, or notices it was closed).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from tests.unit.streams_server import BareProvider
from vkpy.api import ApiDependencies, ApiSettings, KubeletServer, ListenError
from vkpy.api.listener import MAX_HEADER_BYTES
from vkpy.providers.base import (
    ContainerStats,
    LogQuery,
    LogRecord,
    PodRef,
    PodStats,
)
from vkpy.providers.errors import NotFoundError, RetryableError, UnsupportedError

T0 = datetime(2026, 11, 30, 12, 0, 0, tzinfo=UTC)
POD = {
    "metadata": {"name": "web", "namespace": "ns", "uid": "uid-web"},
    "spec": {"containers": [{"name": "app", "image": "x"}], "initContainers": [{"name": "init"}]},
    "status": {"containerStatuses": [{"name": "app", "state": {"running": {}}}]},
}


@dataclass
class ScriptedProvider(BareProvider):
    """container_logs yields `lines` (then waits on `more` when following)."""

    lines: list[bytes] = field(default_factory=list)
    error: Exception | None = None
    more: asyncio.Queue[bytes | None] = field(default_factory=asyncio.Queue)
    queries: list[LogQuery] = field(default_factory=list)
    closed: asyncio.Event = field(default_factory=asyncio.Event)

    async def container_logs(self, ref: PodRef, query: LogQuery) -> AsyncIterator[LogRecord]:
        self.queries.append(query)
        try:
            if self.error is not None:
                raise self.error
            for i, line in enumerate(self.lines):
                yield LogRecord(T0 + timedelta(seconds=i), "stdout", line)
            while query.follow:
                line = await self.more.get()
                if line is None:
                    return
                yield LogRecord(T0, "stdout", line)
        finally:
            self.closed.set()

    async def pod_stats(self) -> list[PodStats]:
        return [
            PodStats(
                PodRef("ns", "web", "uid-web"),
                T0,
                (ContainerStats("app", T0, 3.0, 100, 200, 50),),
            )
        ]


@dataclass
class Api:
    server: KubeletServer
    url: str
    session: aiohttp.ClientSession

    async def get(self, path: str, **kwargs: Any) -> tuple[int, str]:
        async with self.session.get(self.url + path, ssl=False, **kwargs) as response:
            return response.status, await response.text()


StartApi = Callable[..., Any]


@pytest.fixture
async def start_api(tmp_path: Path) -> AsyncIterator[StartApi]:
    tasks: list[asyncio.Task[None]] = []
    sessions: list[aiohttp.ClientSession] = []

    async def start(
        provider: Any,
        client: Any = None,
        pods: list[Any] | None = None,
        running_pods: Any = None,
        **settings: Any,
    ) -> Api:
        base = ApiSettings(
            listen_address="127.0.0.1",
            port=0,
            cert_dir=str(tmp_path / "certs"),
            anonymous_auth=True,
            authorization_mode="AlwaysAllow",
        )
        deps = ApiDependencies(
            node_name="node-1",
            addresses=("127.0.0.1",),
            pods=lambda: pods or [POD],
            find_pod=lambda ns, name, uid: (
                (pods or [POD])[0] if (ns, name) == ("ns", "web") else None
            ),
            provider=provider,
            client=client,
            events=None,  # type: ignore[arg-type]
            running_pods=running_pods,
        )
        server = KubeletServer(replace(base, **settings), deps)
        tasks.append(asyncio.create_task(server.run()))
        await asyncio.wait_for(server.listening.wait(), 10)
        session = aiohttp.ClientSession()
        sessions.append(session)
        return Api(server, f"https://127.0.0.1:{server.port}", session)

    yield start
    for session in sessions:
        await session.close()
    for task in tasks:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task


LOGS = "/containerLogs/ns/web/app"


async def test_logs_are_streamed_with_timestamps_and_limits(start_api: StartApi) -> None:
    provider = ScriptedProvider(lines=[f"line {i}\n".encode() for i in range(3000)])
    api = await start_api(provider)
    status, body = await api.get(LOGS)
    assert status == 200
    assert body == "".join(f"line {i}\n" for i in range(3000))
    status, body = await api.get(LOGS + "?timestamps=true&limitBytes=45")
    assert body == "2026-11-30T12:00:00.000000000Z line 0\n2026-11"
    assert len(body) == 45
    await asyncio.wait_for(provider.closed.wait(), 5)  # closed although not read to the end
    await api.get(LOGS + "?tailLines=2&sinceSeconds=10&previous=true")
    query = provider.queries[-1]
    assert (query.tail_lines, query.previous, query.container) == (2, True, "app")
    assert query.since is not None


async def test_a_log_bigger_than_one_buffer_comes_whole(start_api: StartApi) -> None:
    lines = [f"line {i:06d} {'x' * 50}\n".encode() for i in range(20000)]  # 1.2 MB
    provider = ScriptedProvider(lines=lines)
    api = await start_api(provider)
    status, body = await api.get(LOGS)
    assert status == 200
    assert body.encode() == b"".join(lines)
    status, body = await api.get(LOGS + "?limitBytes=700000")
    assert body.encode() == b"".join(lines)[:700000]
    await asyncio.wait_for(provider.closed.wait(), 5)


async def test_follow_flushes_each_line_and_ends_with_the_stream(start_api: StartApi) -> None:
    provider = ScriptedProvider(lines=[b"first\n"])
    api = await start_api(provider)
    async with api.session.get(api.url + LOGS + "?follow=true", ssl=False) as response:
        assert response.status == 200
        assert await asyncio.wait_for(response.content.readline(), 5) == b"first\n"
        await provider.more.put(b"second\n")
        assert await asyncio.wait_for(response.content.readline(), 5) == b"second\n"
        await provider.more.put(None)
        assert await asyncio.wait_for(response.content.read(), 5) == b""


async def test_client_going_away_closes_the_backend_stream(start_api: StartApi) -> None:
    provider = ScriptedProvider(lines=[b"first\n"])
    api = await start_api(provider)
    response = await api.session.get(api.url + LOGS + "?follow=true", ssl=False)
    assert await asyncio.wait_for(response.content.readline(), 5) == b"first\n"
    response.close()
    await asyncio.wait_for(provider.closed.wait(), 5)
    assert (await api.get("/healthz")) == (200, "ok")


@pytest.mark.parametrize(
    ("error", "status"),
    [
        (UnsupportedError("no logs for this pod"), 501),
        (RetryableError("backend busy"), 503),
    ],
)
async def test_backend_errors_before_the_first_byte(
    start_api: StartApi, error: Exception, status: int
) -> None:
    api = await start_api(ScriptedProvider(error=error))
    assert await api.get(LOGS) == (status, str(error))


async def test_missing_logs_are_said_in_the_kubelets_words(start_api: StartApi) -> None:
    internal = NotFoundError("sim has no pod ns/web/uid-web in /var/lib/vkpy/sim.json")
    api = await start_api(ScriptedProvider(error=internal))
    assert await api.get(LOGS) == (400, 'container "app" in pod "web" is not available')
    assert await api.get(LOGS + "?previous=true") == (
        400,
        'previous terminated container "app" in pod "web" not found',
    )
    waiting = {
        **POD,
        "status": {
            "containerStatuses": [
                {"name": "app", "state": {"waiting": {"reason": "ContainerCreating"}}}
            ]
        },
    }
    api = await start_api(ScriptedProvider(error=internal), pods=[waiting])
    assert await api.get(LOGS) == (
        400,
        'container "app" in pod "web" is waiting to start: ContainerCreating',
    )


async def test_unknown_pods_containers_and_bad_queries(start_api: StartApi) -> None:
    api = await start_api(ScriptedProvider(lines=[b"x\n"]))
    assert await api.get("/containerLogs/ns/nope/app") == (404, 'pod "nope" does not exist')
    assert await api.get("/containerLogs/ns/web/nope") == (
        404,
        'container "nope" not found in pod "web"',
    )
    assert (await api.get(LOGS + "?tailLines=x"))[0] == 400
    assert (await api.get(LOGS + "?tailLines=-1"))[0] == 422
    assert (await api.get(LOGS + "?sinceSeconds=1&sinceTime=2026-01-01T00:00:00Z"))[0] == 422
    for path in (
        "/containerLogs/ns/web/..%2F..%2Fetc%2Fpasswd",
        "/containerLogs/../../etc/passwd",
        "/containerLogs/ns/web/app/../../../x",
        "/containerLogs/ns/web%00/app",
        "/containerLogs/ns",
    ):
        status, _ = await api.get(path)
        assert 400 <= status < 500, path
    status, _ = await api.get("/healthz", headers={"X-Big": "x" * (MAX_HEADER_BYTES + 100)})
    assert 400 <= status < 500
    assert await api.get(LOGS) == (200, "x\n")


@pytest.mark.parametrize(
    "query",
    [
        "sinceTime=0001-01-01T00:00:00%2B23:59",
        "sinceTime=9999-12-31T23:59:59-23:59",
        "sinceSeconds=9223372036854775807",
        "sinceSeconds=99999999999",
    ],
)
async def test_log_times_out_of_range_are_400_not_500(start_api: StartApi, query: str) -> None:
    provider = ScriptedProvider(lines=[b"x\n"])
    api = await start_api(provider)
    assert await api.get(f"{LOGS}?{query}") == (400, '{"message": "Unable to decode query."}')
    assert provider.queries == []
    assert await api.get(LOGS + "?sinceSeconds=60000000000") == (200, "x\n")


async def test_backends_without_logs_or_stats_say_so(start_api: StartApi) -> None:
    api = await start_api(BareProvider())
    assert await api.get(LOGS) == (501, "the bare backend does not provide container logs")
    assert await api.get("/stats/summary") == (501, "the bare backend does not provide stats")
    assert (await api.get("/metrics/resource"))[0] == 501


async def test_pods_stats_metrics_and_reserved_stream_routes(start_api: StartApi) -> None:
    api = await start_api(ScriptedProvider(), metrics_port=0)
    async with api.session.get(api.url + "/pods", ssl=False) as response:
        assert (await response.json())["items"] == [POD]
    async with api.session.get(api.url + "/runningpods/", ssl=False) as response:
        (running,) = (await response.json())["items"]
        assert running["metadata"]["uid"] == "uid-web"
    async with api.session.get(api.url + "/stats/summary", ssl=False) as response:
        summary = await response.json()
        assert summary["pods"][0]["containers"][0]["cpu"]["usageCoreNanoSeconds"] == 3 * 10**9
    status, text = await api.get("/metrics")
    assert status == 200
    assert 'vkpy_kubelet_api_requests_total{code="200",route="/stats/summary"}' in text
    for path in ("/exec/ns/web/app", "/exec/ns/web/uid-web/app", "/portForward/ns/web"):
        async with api.session.post(api.url + path, ssl=False) as response:
            assert response.status != 404  # routed (no upgrade asked: a 4xx/5xx answer)
    async with api.session.post(api.url + "/run/ns/web/app", ssl=False) as response:
        assert response.status == 501
    assert (await api.get("/nothing/here"))[0] == 404


async def test_pods_answers_the_pods_as_they_are_at_each_request(start_api: StartApi) -> None:
    first = {**POD, "status": {"phase": "Pending"}}
    pods = [first]
    api = await start_api(ScriptedProvider(), pods=pods)
    async with api.session.get(api.url + "/pods", ssl=False) as response:
        assert (await response.json())["items"] == [first]
    pods[0] = {**POD, "status": {"phase": "Running"}}  # the controller's newer object
    pods.append({**POD, "metadata": {**POD["metadata"], "name": "db", "uid": "uid-db"}})
    async with api.session.get(api.url + "/pods", ssl=False) as response:
        assert (await response.json())["items"] == pods


async def test_running_pods_come_from_the_view_the_node_gives(start_api: StartApi) -> None:
    backend_pod = {"metadata": {"name": "b", "namespace": "ns", "uid": "uid-b"}, "spec": {}}

    async def running() -> list[dict[str, Any]]:
        return [backend_pod]

    api = await start_api(ScriptedProvider(), running_pods=running)
    async with api.session.get(api.url + "/runningpods/", ssl=False) as response:
        assert (await response.json())["items"] == [backend_pod]


class ReviewingApi:
    """TokenReview accepts "good"; SubjectAccessReview allows only stats."""

    def __init__(self) -> None:
        self.paths: list[str] = []

    async def create(self, path: str, body: dict[str, Any]) -> dict[str, Any]:
        self.paths.append(path)
        if body["kind"] == "TokenReview":
            ok = body["spec"]["token"] == "good"
            return {"status": {"authenticated": ok, "user": {"username": "sa", "groups": ["g"]}}}
        allowed = body["spec"]["resourceAttributes"]["subresource"] == "stats"
        return {"status": {"allowed": allowed}}

    async def get(self, path: str) -> dict[str, Any]:
        raise AssertionError(path)


async def test_every_route_is_behind_authentication_and_authorization(
    start_api: StartApi,
) -> None:
    reviews = ReviewingApi()
    api = await start_api(
        ScriptedProvider(lines=[b"x\n"]),
        client=reviews,
        anonymous_auth=False,
        authorization_mode="Webhook",
    )
    good = {"Authorization": "Bearer good"}
    for path in (LOGS, "/pods", "/healthz", "/exec/ns/web/app", "/no/such/path", "/metrics"):
        assert await api.get(path) == (401, "Unauthorized"), path
        assert await api.get(path, headers={"Authorization": "Bearer bad"}) == (
            401,
            "Unauthorized",
        )
    assert (await api.get("/stats/summary", headers=good))[0] == 200
    assert await api.get(LOGS, headers=good) == (
        403,
        "Forbidden (user=sa, verb=get, resource=nodes, subresource(s)=[proxy])\n",
    )
    assert await api.get("/pods", headers=good) == (
        403,
        "Forbidden (user=sa, verb=get, resource=nodes, subresource(s)=[pods proxy])\n",
    )
    calls = len(reviews.paths)
    await api.get("/stats/summary", headers=good)
    assert len(reviews.paths) == calls  # both answers cached


async def test_a_busy_port_names_the_address_and_the_flags(start_api: StartApi) -> None:
    first = await start_api(ScriptedProvider())
    second = KubeletServer(
        replace(first.server.settings, port=first.server.port), first.server.deps
    )
    with pytest.raises(ListenError) as raised:
        await second.run()
    message = str(raised.value)
    assert f"127.0.0.1:{first.server.port}" in message
    assert "already in use" in message
    assert "--port" in message and "--listen-address" in message
    assert "\n" not in message
