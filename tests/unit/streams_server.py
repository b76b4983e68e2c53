"""A kubelet API with only the stream endpoints, over TLS, and a backend for stream tests.

The stream handlers run exactly as in vkpy (routes, upgrade, sessions, handler
cancellation when a client goes away); only authentication is left out, so that
timeouts can be shortened through `StreamSettings`. The backend runs the sim
backend's built-in commands and records what it was asked and what was cancelled.
"""

from __future__ import annotations

import asyncio
import ssl
import tempfile
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web

from vkpy.api.certs.x509 import self_signed
from vkpy.api.routes import add_routes
from vkpy.api.settings import ApiDependencies
from vkpy.api.state import DEPS
from vkpy.api.streaming.shared import STREAM_SETTINGS, StreamSettings
from vkpy.providers.base import ByteSink, ByteSource, NodeInfo, NodeResources, PodRef, StreamIO
from vkpy.providers.errors import NotFoundError, ProviderError
from vkpy.providers.sim.exec import attach_echo, exec_builtin, serve_port

POD = {
    "metadata": {"name": "web", "namespace": "ns", "uid": "uid-web"},
    "spec": {"containers": [{"name": "app", "image": "x", "stdin": True}]},
}
REFUSED_PORT = 1


class BareProvider:
    """A backend with none of the stream hooks."""

    name = "bare"

    async def start(self) -> None: ...
    async def close(self) -> None: ...
    def node_info(self) -> NodeInfo:
        return NodeInfo("linux", "amd64", "fake", "1")

    def node_resources(self) -> NodeResources:
        return NodeResources({}, {})

    async def ping(self) -> None: ...
    async def create_pod(self, pod: Any) -> None: ...
    async def update_pod(self, pod: Any) -> None: ...
    async def delete_pod(self, ref: PodRef, grace_period: float) -> None: ...
    async def get_pod_status(self, ref: PodRef) -> Any: ...
    async def list_pods(self) -> list[PodRef]:
        return []


@dataclass
class StreamsProvider(BareProvider):
    """exec: the sim built-ins (`missing` raises NotFoundError); attach: echo until
    stdin ends; port-forward: the sim responder, REFUSED_PORT refused."""

    name = "fake"
    commands: list[tuple[str, ...]] = field(default_factory=list)
    cancelled: list[str] = field(default_factory=list)
    running: int = 0
    forwards: int = 0
    started: asyncio.Event = field(default_factory=asyncio.Event)

    async def exec_in_container(
        self, ref: PodRef, container: str, command: Sequence[str], io: StreamIO
    ) -> int:
        self.commands.append(tuple(command))
        if command[0] == "missing":
            raise NotFoundError('container "app" is not running')
        if command[0] == "explode":
            raise RuntimeError("/usr/lib/python3/site-packages/vkpy/secret.py line 1")
        self.running += 1
        self.started.set()
        try:
            return await exec_builtin(ref, {"GREETING": "hello"}, command, io)
        except asyncio.CancelledError:
            self.cancelled.append(" ".join(command))
            raise
        finally:
            self.running -= 1

    async def attach_to_container(self, ref: PodRef, container: str, io: StreamIO) -> int | None:
        self.running += 1
        self.started.set()
        try:
            await attach_echo(io, asyncio.Event())
        except asyncio.CancelledError:
            self.cancelled.append("attach")
            raise
        finally:
            self.running -= 1
        return None

    async def port_forward(
        self, ref: PodRef, port: int, inbound: ByteSource, outbound: ByteSink
    ) -> None:
        if port == REFUSED_PORT:
            raise ProviderError("dial tcp 127.0.0.1:1: connect: connection refused")
        self.forwards += 1
        try:
            await serve_port(ref, port, inbound, outbound)
        except asyncio.CancelledError:
            self.cancelled.append(f"port {port}")
            raise
        finally:
            self.forwards -= 1


def _find_pod(namespace: str, name: str, uid: str | None) -> dict[str, Any] | None:
    meta = POD["metadata"]
    if (namespace, name) != (meta["namespace"], meta["name"]):
        return None
    if uid is not None and uid != meta["uid"]:
        return None
    return POD


def server_ssl() -> tuple[ssl.SSLContext, ssl.SSLContext]:
    """(server context with a fresh self-signed pair, client context that does not verify)."""
    pair = self_signed("127.0.0.1", ["127.0.0.1"])
    with tempfile.TemporaryDirectory() as tmp:
        cert, key = Path(tmp) / "c.pem", Path(tmp) / "k.pem"
        cert.write_bytes(pair.cert_pem)
        key.write_bytes(pair.key_pem)
        server = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        server.load_cert_chain(cert, key)
    client = ssl.create_default_context()
    client.check_hostname = False
    client.verify_mode = ssl.CERT_NONE
    return server, client


@dataclass
class StreamsServer:
    runner: web.AppRunner
    port: int
    client_ssl: ssl.SSLContext

    @property
    def url(self) -> str:
        return f"https://127.0.0.1:{self.port}"


async def start_server(provider: Any, settings: StreamSettings | None = None) -> StreamsServer:
    app = web.Application()
    app[DEPS] = ApiDependencies(
        node_name="node-1",
        addresses=("127.0.0.1",),
        pods=lambda: [POD],
        find_pod=_find_pod,
        provider=provider,
        client=None,  # type: ignore[arg-type]
        events=None,  # type: ignore[arg-type]
    )
    app[STREAM_SETTINGS] = settings or StreamSettings()
    add_routes(app)
    runner = web.AppRunner(app, handler_cancellation=True, access_log=None, shutdown_timeout=2)
    await runner.setup()
    server_context, client_context = server_ssl()
    site = web.TCPSite(runner, "127.0.0.1", 0, ssl_context=server_context)
    await site.start()
    port = int(runner.addresses[0][1])
    return StreamsServer(runner, port, client_context)


StartServer = Callable[..., Awaitable[StreamsServer]]


@pytest.fixture
async def start() -> AsyncIterator[StartServer]:
    """start(provider=StreamsProvider(), **StreamSettings fields) -> a running server;
    every server is cleaned up after the test."""
    servers: list[StreamsServer] = []

    async def start_one(provider: Any = None, **settings: Any) -> StreamsServer:
        server = await start_server(
            provider if provider is not None else StreamsProvider(), StreamSettings(**settings)
        )
        servers.append(server)
        return server

    yield start_one
    for server in servers:
        await server.runner.cleanup()
