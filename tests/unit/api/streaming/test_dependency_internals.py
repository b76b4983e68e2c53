"""The internals of aiohttp and kubernetes-asyncio that vkpy relies on are still there.

pyproject.toml bounds both libraries from above to the releases these tests passed
on. Before raising a bound, run this file against the new release: each failure
names the internal that changed and the vkpy code that uses it.

- aiohttp: the SPDY upgrade (vkpy/api/streaming/upgrade.py) takes over the connection with
  `RequestHandler.set_parser(parser)` (the hook of aiohttp's own WebSocket support),
  whose parser is fed `feed_data(bytes) -> (eof, tail)` and `feed_eof()`, and writes
  through `request.transport` with back-pressure from `request.writer.drain()`.
- aiohttp: the API client's connector (vkpy/kube/tls_pool.py) opens TCP connections
  through `TCPConnector._wrap_create_connection(factory, *args, req=..., **kwargs)` and
  runs TLS over them itself.
- kubernetes-asyncio (only for kubeconfigs with an `exec` or `auth-provider` credential
  plugin, vkpy/kube/access.py `plugin_access`): KubeClient sends requests through
  `ApiClient.rest_client.pool_manager` (an aiohttp ClientSession sized by
  `Configuration.connection_pool_maxsize`), adds credentials with
  `ApiClient.update_params_for_auth(headers, queries, ["BearerToken"])`, and reads the
  cluster CA from `Configuration.ssl_ca_cert` (a file, written by the kubeconfig loader).
"""

from __future__ import annotations

import asyncio
import base64
import inspect
from pathlib import Path

import aiohttp
import pytest
import yaml
from aiohttp import web, web_protocol
from kubernetes_asyncio import client as k8s_client
from kubernetes_asyncio import config as k8s_config

from vkpy.api.streaming.upgrade import UpgradedConnection
from vkpy.devcluster import CertificateAuthority


def changed(library: str, internal: str, user: str) -> str:
    return (
        f"{library} internal changed: {internal} (used by {user}); adapt vkpy before "
        f"raising the {library} upper bound in pyproject.toml"
    )


SET_PARSER = changed(
    "aiohttp", "RequestHandler.set_parser(parser)", "vkpy/api/streaming/upgrade.py"
)


def test_aiohttp_request_handler_has_set_parser() -> None:
    set_parser = getattr(web_protocol.RequestHandler, "set_parser", None)
    assert callable(set_parser), SET_PARSER
    params = list(inspect.signature(set_parser).parameters.values())[1:]
    assert params, SET_PARSER
    required = [p for p in params[1:] if p.default is inspect.Parameter.empty]
    assert not required, SET_PARSER


async def test_aiohttp_hands_the_upgraded_connection_to_the_parser() -> None:
    received: list[bytes] = []
    ended = asyncio.Event()

    class Receiver:
        def feed_data(self, data: bytes) -> None:
            received.append(data)

        def feed_eof(self) -> None:
            ended.set()

    async def handler(request: web.Request) -> web.StreamResponse:
        connection = UpgradedConnection(request)
        response = await connection.upgrade(Receiver(), {"X-Stream-Protocol-Version": "v4"})
        connection.write(b"from-server")
        await connection.drain()
        await asyncio.wait_for(ended.wait(), 5)
        return response

    app = web.Application()
    app.router.add_post("/exec", handler)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    try:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(
            b"POST /exec HTTP/1.1\r\nHost: x\r\nConnection: Upgrade\r\nUpgrade: SPDY/3.1\r\n"
            b"Content-Length: 0\r\n\r\n"
        )
        head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 5)
        assert head.startswith(b"HTTP/1.1 101"), head
        assert await asyncio.wait_for(reader.readexactly(11), 5) == b"from-server", changed(
            "aiohttp", "request.transport / request.writer.drain()", "vkpy/api/streaming/upgrade.py"
        )
        writer.write(b"GET / HTTP/1.1\r\n\r\n")  # must reach us, not aiohttp's HTTP parser
        await writer.drain()
        async with asyncio.timeout(5):
            while b"".join(received) != b"GET / HTTP/1.1\r\n\r\n":
                await asyncio.sleep(0.01)
        writer.close()
        await asyncio.wait_for(ended.wait(), 5)
    except (TimeoutError, AssertionError) as error:
        raise AssertionError(f"{SET_PARSER}: {error!r}") from error
    finally:
        await runner.cleanup()


POOL = changed(
    "kubernetes-asyncio",
    "ApiClient.rest_client.pool_manager (an aiohttp.ClientSession sized by "
    "Configuration.connection_pool_maxsize)",
    "vkpy/kube/client.py KubeClient.open (credential plugins)",
)


async def test_kubernetes_asyncio_pool_manager_is_an_aiohttp_session() -> None:
    configuration = k8s_client.Configuration()
    configuration.host = "http://127.0.0.1:1"
    configuration.connection_pool_maxsize = 17
    api = k8s_client.ApiClient(configuration)
    try:
        rest_client = getattr(api, "rest_client", None)
        session = getattr(rest_client, "pool_manager", None)
        assert isinstance(session, aiohttp.ClientSession), POOL
        assert session.connector is not None and session.connector.limit == 17, POOL
    finally:
        await api.close()


async def test_kubernetes_asyncio_adds_the_bearer_token() -> None:
    configuration = k8s_client.Configuration()
    configuration.api_key["BearerToken"] = "Bearer secret-token"
    api = k8s_client.ApiClient(configuration)
    try:
        headers: dict[str, str] = {}
        await api.update_params_for_auth(headers, [], ["BearerToken"])
        assert headers.get("authorization") == "Bearer secret-token", changed(
            "kubernetes-asyncio",
            'ApiClient.update_params_for_auth(headers, queries, ["BearerToken"])',
            "vkpy/kube/access.py plugin_access",
        )
    finally:
        await api.close()


async def test_kubernetes_asyncio_loader_leaves_the_ca_in_a_file(tmp_path: Path) -> None:
    ca = CertificateAuthority.create("internals").cert_pem
    path = tmp_path / "config"
    path.write_text(
        yaml.safe_dump(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "clusters": [
                    {
                        "name": "c",
                        "cluster": {
                            "server": "https://127.0.0.1:6443",
                            "certificate-authority-data": base64.b64encode(ca).decode(),
                        },
                    }
                ],
                "contexts": [{"name": "c", "context": {"cluster": "c", "user": "u"}}],
                "users": [{"name": "u", "user": {"token": "t"}}],
                "current-context": "c",
            }
        )
    )
    configuration = k8s_client.Configuration()
    await k8s_config.load_kube_config(
        config_file=str(path), client_configuration=configuration, persist_config=False
    )
    message = changed(
        "kubernetes-asyncio",
        "Configuration.ssl_ca_cert (a file path set by load_kube_config)",
        "vkpy/kube/access.py plugin_access",
    )
    ca_file = getattr(configuration, "ssl_ca_cert", None)
    assert isinstance(ca_file, str), message
    assert Path(ca_file).read_bytes() == ca, message


@pytest.mark.parametrize("library", ["aiohttp", "kubernetes-asyncio"])
def test_pyproject_bounds_both_from_above(library: str) -> None:
    pyproject = Path(__file__).parents[4] / "pyproject.toml"
    lines = [line for line in pyproject.read_text().splitlines() if f'"{library}>=' in line]
    assert lines and ",<" in lines[0], f"{library} needs an upper bound in pyproject.toml"


WRAP_CREATE = changed(
    "aiohttp",
    "TCPConnector._wrap_create_connection(factory, ..., req=...)",
    "vkpy/kube/tls_pool.py",
)


def test_aiohttp_connector_opens_connections_through_wrap_create_connection() -> None:
    wrap = getattr(aiohttp.TCPConnector, "_wrap_create_connection", None)
    assert inspect.iscoroutinefunction(wrap), WRAP_CREATE
    params = inspect.signature(wrap).parameters
    assert "req" in params and any(p.kind is p.VAR_POSITIONAL for p in params.values()), WRAP_CREATE
