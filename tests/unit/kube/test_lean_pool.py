"""The heartbeat client's own connections (vkpy/kube/lean_pool.py), against a real
HTTPS server on 127.0.0.1 (aiohttp's) with a certificate the client verifies: what
the client sends, how it reads each way a server may frame an answer, and what it
does when the server closes, stalls or is gone."""

from __future__ import annotations

import asyncio
import contextlib
import ssl
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from aiohttp import web

from vkpy.api.certs.x509 import self_signed
from vkpy.kube.access import Access
from vkpy.kube.client import MERGE_PATCH, ApiError, ClientOptions, KubeClient
from vkpy.kube.lean_pool import LeanPool

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


@dataclass
class Server:
    port: int
    seen: list[web.Request] = field(default_factory=list)
    peers: list[tuple[str, int]] = field(default_factory=list)
    bodies: list[bytes] = field(default_factory=list)
    handler: Handler | None = None


@dataclass
class Served:
    server: Server
    context: ssl.SSLContext
    runner: web.AppRunner

    def client(
        self, prefix: str = "", **access: object
    ) -> contextlib.AbstractAsyncContextManager[KubeClient]:
        """The heartbeat client (`separate_pool`) of a client to this server."""
        url = f"https://127.0.0.1:{self.server.port}{prefix}"
        return heartbeat_client(Access(url, self.context, **access))  # type: ignore[arg-type]


@contextlib.asynccontextmanager
async def heartbeat_client(access: Access) -> AsyncIterator[KubeClient]:
    """`separate_pool` of a client to `access`; both closed after."""
    main = KubeClient.open(access, ClientOptions(max_connections=4, request_timeout=5))
    heartbeat = main.separate_pool(4)
    try:
        yield heartbeat
    finally:
        await heartbeat.close()
        await main.close()


async def json_answer(request: web.Request) -> web.StreamResponse:
    return web.json_response({"kind": "Lease", "path": request.path})


@pytest.fixture(scope="module")
def pair_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One serving pair for the module (making a key takes a second or two)."""
    pair = self_signed("127.0.0.1", ["127.0.0.1"])
    directory = tmp_path_factory.mktemp("pair")
    (directory / "tls.crt").write_bytes(pair.cert_pem)
    (directory / "tls.key").write_bytes(pair.key_pem)
    return directory


@pytest.fixture
async def served(pair_dir: Path) -> AsyncIterator[Served]:
    tmp_path = pair_dir
    server_side = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    server_side.load_cert_chain(tmp_path / "tls.crt", tmp_path / "tls.key")
    client_side = ssl.create_default_context(cafile=str(tmp_path / "tls.crt"))
    server = Server(port=0)

    async def handle(request: web.Request) -> web.StreamResponse:
        server.seen.append(request)
        server.peers.append(request.transport.get_extra_info("peername"))  # type: ignore[union-attr]
        server.bodies.append(await request.read())
        return await (server.handler or json_answer)(request)

    app = web.Application()
    app.router.add_route("*", "/{tail:.*}", handle)
    runner = web.AppRunner(app, handler_cancellation=True, shutdown_timeout=1)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0, ssl_context=server_side)
    await site.start()
    server.port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    try:
        yield Served(server, client_side, runner)
    finally:
        await runner.cleanup()


async def test_lease_renewals_share_one_kept_connection_and_send_what_a_client_sends(
    served: Served,
) -> None:
    async with served.client() as client:
        for _ in range(5):
            await client.patch(
                "/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases/n1",
                {"spec": {"renewTime": "2026-12-06T03:00:00.000000Z"}},
                MERGE_PATCH,
                decode=False,
            )
        got = await client.get("/api/v1/nodes/n1")
        assert client._lean is not None and client._lean.connections == 1  # not aiohttp's
    assert got == {"kind": "Lease", "path": "/api/v1/nodes/n1"}
    assert len(set(served.server.peers)) == 1  # one connection, kept alive
    first = served.server.seen[0]
    assert first.method == "PATCH"
    assert first.headers["Content-Type"] == MERGE_PATCH
    assert first.headers["Host"] == f"127.0.0.1:{served.server.port}"
    assert served.server.bodies[0] == b'{"spec":{"renewTime":"2026-12-06T03:00:00.000000Z"}}'
    assert served.server.seen[-1].method == "GET"
    assert served.server.bodies[-1] == b""


async def test_query_credentials_and_a_path_prefix_reach_the_server(served: Served) -> None:
    async def bearer() -> dict[str, str]:
        return {"Authorization": "Bearer s3cret"}

    async with served.client(prefix="/k8s/clusters/c-1", auth=bearer) as client:
        await client.get("/api/v1/pods", {"labelSelector": "app in (a,b),tier=web", "limit": 5})
    request = served.server.seen[0]
    assert request.path == "/k8s/clusters/c-1/api/v1/pods"
    assert request.query["labelSelector"] == "app in (a,b),tier=web"
    assert request.query["limit"] == "5"
    assert request.headers["Authorization"] == "Bearer s3cret"


async def test_a_chunked_answer_is_read_whole(served: Served) -> None:
    async def chunked(request: web.Request) -> web.StreamResponse:
        response = web.StreamResponse(headers={"Content-Type": "application/json"})
        response.enable_chunked_encoding()
        await response.prepare(request)
        for part in (b'{"items": [', b'{"a": 1}, ', b'{"b": 2}]}'):
            await response.write(part)
            await asyncio.sleep(0.01)
        await response.write_eof()
        return response

    served.server.handler = chunked
    async with served.client() as client:
        assert await client.get("/api/v1/things") == {"items": [{"a": 1}, {"b": 2}]}
        assert await client.get("/api/v1/things") == {"items": [{"a": 1}, {"b": 2}]}
    assert len(set(served.server.peers)) == 1


async def test_an_error_status_is_the_api_error_of_its_body(served: Served) -> None:
    async def missing(request: web.Request) -> web.StreamResponse:
        status = {"kind": "Status", "status": "Failure", "reason": "NotFound", "code": 404,
                  "message": 'leases.coordination.k8s.io "n1" not found'}  # fmt: skip
        return web.json_response(status, status=404)

    served.server.handler = missing
    async with served.client() as client:
        with pytest.raises(ApiError) as raised:
            await client.patch("/apis/coordination.k8s.io/v1/leases/n1", {}, MERGE_PATCH)
    assert raised.value.not_found
    assert "not found" in str(raised.value)


async def test_a_connection_the_server_closes_is_not_used_again(served: Served) -> None:
    async def closing(request: web.Request) -> web.StreamResponse:
        response = web.json_response({"ok": True}, headers={"Connection": "close"})
        response.force_close()
        return response

    served.server.handler = closing
    async with served.client() as client:
        for _ in range(3):
            assert await client.get("/api/v1/nodes/n1") == {"ok": True}
    assert len(set(served.server.peers)) == 3


async def test_an_idle_connection_closed_by_the_server_is_replaced(served: Served) -> None:
    async with served.client() as client:
        await client.get("/api/v1/nodes/n1")
        # the server ends every kept connection (as an API server restarting does)
        for protocol in list(served.runner.server.connections):  # type: ignore[union-attr]
            protocol.force_close()
            if protocol.transport is not None:
                protocol.transport.close()
        await asyncio.sleep(0.1)
        assert await client.get("/api/v1/nodes/n2") == {"kind": "Lease", "path": "/api/v1/nodes/n2"}
    assert len(set(served.server.peers)) == 2


async def test_a_stalled_answer_times_out_and_the_next_request_still_works(
    served: Served,
) -> None:
    stall = asyncio.Event()

    async def stalling(request: web.Request) -> web.StreamResponse:
        if not stall.is_set():
            stall.set()
            await asyncio.sleep(30)
        return await json_answer(request)

    served.server.handler = stalling
    async with served.client() as client:
        with pytest.raises(ApiError) as raised:
            await client.request("GET", "/api/v1/nodes/slow", timeout=0.3)
        assert raised.value.status == 0
        assert await client.get("/api/v1/nodes/n1") == {"kind": "Lease", "path": "/api/v1/nodes/n1"}


async def test_requests_at_once_use_at_most_the_pools_connections(served: Served) -> None:
    async def slow(request: web.Request) -> web.StreamResponse:
        await asyncio.sleep(0.02)
        return await json_answer(request)

    served.server.handler = slow
    async with served.client() as client:
        answers = await asyncio.gather(*(client.get(f"/api/v1/nodes/n{i}") for i in range(20)))
    assert [a["path"] for a in answers] == [f"/api/v1/nodes/n{i}" for i in range(20)]
    assert len(set(served.server.peers)) <= 4


async def unreachable(access: Access) -> ApiError:
    """The error a heartbeat client to `access` meets on its first request."""
    async with heartbeat_client(access) as client:
        with pytest.raises(ApiError) as raised:
            await client.get("/api/v1/nodes/n1")
    assert raised.value.status == 0
    return raised.value


async def test_an_untrusted_server_certificate_is_refused(served: Served) -> None:
    untrusting = Access(f"https://127.0.0.1:{served.server.port}", ssl.create_default_context())
    assert "CERTIFICATE_VERIFY_FAILED" in str(await unreachable(untrusting))
    assert served.server.seen == []


async def test_a_server_that_is_gone_is_unreachable() -> None:
    assert (await unreachable(Access("http://127.0.0.1:9", None))).reason == "Unreachable"


def test_only_a_direct_http_or_https_server_gets_a_lean_pool() -> None:
    assert LeanPool.usable("https://10.0.0.1:6443", None)
    assert LeanPool.usable("http://127.0.0.1:8080", None)
    assert not LeanPool.usable("https://10.0.0.1:6443", "http://proxy:3128")
    with pytest.raises(ValueError, match="needs a TLS context"):
        LeanPool("https://10.0.0.1:6443", None)
