"""vkpy reads kubeconfigs and the service account itself (vkpy/kube/access.py).

Each test connects to a real local HTTPS server that checks what a real API server
would: the server certificate against the kubeconfig's CA, the client certificate,
the bearer token. kubernetes-asyncio (38 MiB of models) is imported only for a
credential plugin, which a subprocess checks.
"""

from __future__ import annotations

import asyncio
import base64
import ssl
import subprocess
import sys
import tracemalloc
from asyncio import sslproto
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml
from aiohttp import web

from vkpy.devcluster import CertificateAuthority
from vkpy.kube import access as kube_access
from vkpy.kube.client import ApiError, ClientOptions, KubeClient


@dataclass
class Server:
    url: str
    ca: CertificateAuthority
    seen: list[dict[str, str]]
    dir: Path
    slow_peers: set[object]


@pytest.fixture
async def server(tmp_path: Path) -> AsyncIterator[Server]:
    """An HTTPS server that asks for a client certificate (optional) and echoes what it got."""
    ca = CertificateAuthority.create("access-test")
    cert, key = ca.issue("127.0.0.1", ip_addresses=["127.0.0.1"], server=True)
    (tmp_path / "server.crt").write_bytes(cert)
    (tmp_path / "server.key").write_bytes(key)
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH, cadata=ca.cert_pem.decode())
    context.load_cert_chain(tmp_path / "server.crt", tmp_path / "server.key")
    context.verify_mode = ssl.CERT_OPTIONAL
    seen: list[dict[str, str]] = []

    async def who(request: web.Request) -> web.Response:
        peer = request.transport.get_extra_info("peercert") if request.transport else None
        subject = dict(x[0] for x in (peer or {}).get("subject", ()))
        seen.append(
            {"auth": request.headers.get("Authorization", ""), "cn": subject.get("commonName", "")}
        )
        return web.json_response({"kind": "Status"})

    slow_peers: set[object] = set()

    async def slow(request: web.Request) -> web.Response:
        slow_peers.add(request.transport.get_extra_info("peername") if request.transport else None)
        await asyncio.sleep(0.3)
        return web.json_response({"kind": "Status"})

    app = web.Application()
    app.router.add_get("/version", who)
    app.router.add_get("/slow", slow)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0, ssl_context=context)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    try:
        yield Server(f"https://127.0.0.1:{port}", ca, seen, tmp_path, slow_peers)
    finally:
        await runner.cleanup()


def kubeconfig(path: Path, cluster: dict[str, object], user: dict[str, object]) -> Path:
    path.write_text(
        yaml.safe_dump(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "clusters": [{"name": "c", "cluster": cluster}],
                "users": [{"name": "u", "user": user}],
                "contexts": [{"name": "x", "context": {"cluster": "c", "user": "u"}}],
                "current-context": "x",
            }
        )
    )
    return path


async def get_version(config: Path) -> None:
    client = await KubeClient.connect(ClientOptions(kubeconfig=str(config)))
    try:
        await client.get("/version")
    finally:
        await client.close()


async def test_client_certificate_and_ca_from_files_relative_to_the_kubeconfig(
    server: Server,
) -> None:
    cert, key = server.ca.issue("vk-user", client=True)
    folder = server.dir / "conf"
    folder.mkdir()
    (folder / "ca.pem").write_bytes(server.ca.cert_pem)
    (folder / "user.crt").write_bytes(cert)
    (folder / "user.key").write_bytes(key)
    config = kubeconfig(
        folder / "config",
        {"server": server.url, "certificate-authority": "ca.pem"},
        {"client-certificate": "user.crt", "client-key": "user.key"},
    )
    await get_version(config)
    assert server.seen == [{"auth": "", "cn": "vk-user"}]


async def test_embedded_certificate_data_and_a_token(server: Server) -> None:
    cert, key = server.ca.issue("vk-embedded", client=True)
    config = kubeconfig(
        server.dir / "config",
        {
            "server": server.url,
            "certificate-authority-data": base64.b64encode(server.ca.cert_pem).decode(),
        },
        {
            "client-certificate-data": base64.b64encode(cert).decode(),
            "client-key-data": base64.b64encode(key).decode(),
            "token": "secret-1",
        },
    )
    await get_version(config)
    assert server.seen == [{"auth": "Bearer secret-1", "cn": "vk-embedded"}]


async def test_token_file(server: Server) -> None:
    (server.dir / "ca.pem").write_bytes(server.ca.cert_pem)
    (server.dir / "token").write_text("from-a-file\n")
    config = kubeconfig(
        server.dir / "config",
        {"server": server.url, "certificate-authority": str(server.dir / "ca.pem")},
        {"tokenFile": "token"},
    )
    await get_version(config)
    assert server.seen == [{"auth": "Bearer from-a-file", "cn": ""}]


async def test_an_unknown_ca_is_refused_unless_verification_is_skipped(server: Server) -> None:
    other = CertificateAuthority.create("someone-else").cert_pem
    refused = kubeconfig(
        server.dir / "refused",
        {"server": server.url, "certificate-authority-data": base64.b64encode(other).decode()},
        {"token": "t"},
    )
    with pytest.raises(ApiError) as error:
        await get_version(refused)
    assert error.value.status == 0 and not server.seen
    skipped = kubeconfig(
        server.dir / "skipped", {"server": server.url, "insecure-skip-tls-verify": True}, {}
    )
    await get_version(skipped)
    assert len(server.seen) == 1


def _token_kubeconfig(server: Server) -> Path:
    """A kubeconfig for `server` with its CA and a bearer token."""
    (server.dir / "ca.pem").write_bytes(server.ca.cert_pem)
    return kubeconfig(
        server.dir / "config",
        {"server": server.url, "certificate-authority": "ca.pem"},
        {"token": "t"},
    )


async def test_a_pool_of_connections_holds_small_tls_buffers(server: Server) -> None:
    """A burst leaves one pooled connection per request that was in flight (HTTP/1.1),
    and asyncio's TLS layer reads into a 256 KiB buffer per connection unless told
    otherwise: 40 connections held 10 MiB (issue 17, settled RSS)."""
    config = _token_kubeconfig(server)
    # Tracing every allocation makes 40 handshakes slow on a loaded machine: the
    # requests get all the time they need (this measures memory, not time).
    client = await KubeClient.connect(ClientOptions(kubeconfig=str(config), request_timeout=600))
    tracemalloc.start(64)
    try:
        await asyncio.gather(*(client.get("/slow") for _ in range(40)))
        snapshot = tracemalloc.take_snapshot()
    finally:
        tracemalloc.stop()
        await client.close()
    assert len(server.slow_peers) == 40
    client_side = snapshot.filter_traces(
        [tracemalloc.Filter(True, "*aiohttp/connector.py", all_frames=True)]
    )
    tls_buffers = client_side.filter_traces([tracemalloc.Filter(True, sslproto.__file__)])
    held = sum(stat.size for stat in tls_buffers.statistics("filename"))
    assert 0 < held < 40 * 32 * 1024


async def test_in_cluster_service_account(server: Server) -> None:
    account = server.dir / "sa"
    account.mkdir()
    (account / "token").write_text("sa-token")
    (account / "ca.crt").write_bytes(server.ca.cert_pem)
    port = server.url.rsplit(":", 1)[1]
    environ = {"KUBERNETES_SERVICE_HOST": "127.0.0.1", "KUBERNETES_SERVICE_PORT": port}
    client = KubeClient.open(kube_access.in_cluster(environ, account), ClientOptions())
    try:
        await client.get("/version")
        assert client.cluster_ca() == server.ca.cert_pem
    finally:
        await client.close()
    assert server.seen == [{"auth": "Bearer sa-token", "cn": ""}]


def test_in_cluster_outside_a_cluster_is_a_clear_error(tmp_path: Path) -> None:
    with pytest.raises(kube_access.AccessError, match="KUBERNETES_SERVICE_HOST"):
        kube_access.in_cluster({}, tmp_path)


def test_the_agent_does_not_import_the_generated_client() -> None:
    """Importing the whole agent leaves kubernetes-asyncio (and its 38 MiB) unloaded."""
    code = "import sys, vkpy.app.cli, vkpy.app.runner; print('kubernetes_asyncio' in sys.modules)"
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    )
    assert result.stdout.strip() == "False"


def test_a_credential_plugin_uses_kubernetes_asyncio(tmp_path: Path) -> None:
    """An exec plugin's user is left to kubernetes-asyncio's loader, which runs it."""
    config = kubeconfig(
        tmp_path / "config",
        {"server": "https://127.0.0.1:1", "insecure-skip-tls-verify": True},
        {
            "exec": {
                "apiVersion": "client.authentication.k8s.io/v1",
                "command": sys.executable,
                "args": [
                    "-c",
                    'print(\'{"apiVersion": "client.authentication.k8s.io/v1", '
                    '"kind": "ExecCredential", "status": {"token": "from-plugin"}}\')',
                ],
                "interactiveMode": "Never",
            }
        },
    )
    assert kube_access.read_kubeconfig(str(config), None) is None
    code = (
        "import asyncio, sys\n"
        "from vkpy.kube import access\n"
        f"a = asyncio.run(access.from_kubeconfig({str(config)!r}, None))\n"
        "print(asyncio.run(a.auth())['authorization'], 'kubernetes_asyncio' in sys.modules)\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    )
    assert result.stdout.strip() == "Bearer from-plugin True"


async def test_heartbeats_have_a_pool_of_their_own(server: Server) -> None:
    """A node set's Lease renewals and node status go through a connection pool of
    their own, as the kubelet's heartbeat client does: 10,000 pods starting on 1000
    nodes filled the one pool with pod work, renewals waited behind it past the
    client's timeout, and the nodes went NotReady (issue 17)."""
    config = _token_kubeconfig(server)
    client = await KubeClient.connect(ClientOptions(kubeconfig=str(config), max_connections=2))
    heartbeats = client.separate_pool(max_connections=1)
    try:
        pod_work = [asyncio.create_task(client.get("/slow")) for _ in range(40)]
        await asyncio.sleep(0.1)  # the pool is full, 38 requests wait for it
        await heartbeats.get("/version")
        finished = sum(task.done() for task in pod_work)
        assert finished < len(pod_work) / 2, "the renewal waited for the pod work"
        await asyncio.gather(*pod_work)
    finally:
        await heartbeats.close()
        await client.close()
    assert server.seen[-1]["auth"] == "Bearer t"
