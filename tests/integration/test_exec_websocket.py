"""Clients that reach the kubelet port directly over WebSocket, with a client certificate.

The kubernetes-asyncio stream client (`WsApiClient`, v4.channel.k8s.io) as people
use it, a raw v5.channel.k8s.io client (aiohttp) that closes stdin with the v5 close
signal, and port-forward over WebSocket; the same authentication and authorization as
every other kubelet path apply to the upgrade (no certificate: 401).
"""

# ruff: noqa: F811 - pytest fixtures are imported by name and then requested as arguments
from __future__ import annotations

import asyncio
import json
import ssl
from urllib.parse import urlencode

import aiohttp
import pytest
from kubernetes_asyncio.client import Configuration
from kubernetes_asyncio.stream import WsApiClient

from tests.integration.stream_fixtures import Box, process_box  # noqa: F401
from tests.integration.stream_helpers import client_certificate
from tests.stream_clients import SpdyClient
from vkpy.devcluster import ClusterAccess


def tls(cert: str, key: str) -> ssl.SSLContext:
    context = ssl.create_default_context()
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE  # the node serves a self-signed certificate here
    context.load_cert_chain(cert, key)
    return context


async def test_kubernetes_asyncio_stream_client(
    cluster: ClusterAccess, process_box: Box, namespace: str
) -> None:
    url = f"https://127.0.0.1:{process_box.agent.port}"
    with client_certificate(cluster) as (cert, key):
        config = Configuration(host=url)
        config.cert_file, config.key_file, config.verify_ssl = cert, key, False
        async with WsApiClient(configuration=config) as client:
            response = await client.request(
                "GET",
                f"{url}/exec/{namespace}/box/app",
                query_params=[
                    ("command", ["sh", "-c", "echo $GREETING; echo to-stderr >&2"]),
                    ("output", "1"),
                    ("error", "1"),
                ],
            )
    assert response.data.decode() == "hello from the pod\nto-stderr\n"


async def test_raw_v5_client_with_close_signal(
    cluster: ClusterAccess, process_box: Box, namespace: str
) -> None:
    base = f"https://127.0.0.1:{process_box.agent.port}/exec/{namespace}/box/app"
    query = urlencode([("command", "wc"), ("command", "-c"), ("input", "1"), ("output", "1")])
    with client_certificate(cluster) as (cert, key):
        context = tls(cert, key)
    received: dict[int, bytes] = {}
    async with aiohttp.ClientSession() as http:
        async with http.ws_connect(
            f"{base}?{query}", protocols=["v5.channel.k8s.io"], ssl=context
        ) as ws:
            assert ws.protocol == "v5.channel.k8s.io"
            await ws.send_bytes(b"\x00" + b"x" * 100_000)
            await ws.send_bytes(b"\xff\x00")  # v5: stdin is closed
            async for message in ws:
                data = message.data
                if data[:1] == b"\xff":
                    received.setdefault(-data[1], b"")  # closed channel
                else:
                    received[data[0]] = received.get(data[0], b"") + data[1:]
    assert received[1].strip() == b"100000"
    assert -1 in received  # stdout was closed with the close signal
    assert json.loads(received[3]) == {"metadata": {}, "status": "Success"}


async def test_port_forward_over_websocket(
    cluster: ClusterAccess, process_box: Box, namespace: str
) -> None:
    port = process_box.http_port
    url = f"https://127.0.0.1:{process_box.agent.port}/portForward/{namespace}/box?port={port}"
    with client_certificate(cluster) as (cert, key):
        context = tls(cert, key)
    async with aiohttp.ClientSession() as http:
        async with http.ws_connect(url, protocols=["v4.channel.k8s.io"], ssl=context) as ws:
            prefix = port.to_bytes(2, "little")
            assert await ws.receive_bytes(timeout=10) == b"\x00" + prefix
            assert await ws.receive_bytes(timeout=10) == b"\x01" + prefix
            await ws.send_bytes(b"\x00GET / HTTP/1.0\r\n\r\n")
            answer = b""
            while b"Directory listing for /" not in answer:
                message = await asyncio.wait_for(ws.receive_bytes(), 10)
                assert message[0] == 0
                answer += message[1:]
    assert answer.startswith(b"HTTP/1.0 200 OK")


@pytest.mark.parametrize(
    "path", ["exec/{ns}/box/app?command=true&output=1", "portForward/{ns}/box?port=1"]
)
async def test_upgrades_need_credentials(process_box: Box, namespace: str, path: str) -> None:
    url = f"https://127.0.0.1:{process_box.agent.port}/" + path.format(ns=namespace)
    context = ssl.create_default_context()
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE
    async with aiohttp.ClientSession() as http:
        with pytest.raises(aiohttp.WSServerHandshakeError) as refused:
            await http.ws_connect(url, protocols=["v4.channel.k8s.io"], ssl=context)
    assert refused.value.status == 401


async def test_spdy_upgrade_needs_credentials_too(process_box: Box, namespace: str) -> None:
    context = ssl.create_default_context()
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE
    client, answer = await SpdyClient.connect(
        "127.0.0.1",
        process_box.agent.port,
        f"/exec/{namespace}/box/app?command=true&output=1",
        ssl_context=context,
    )
    assert client is None
    assert answer.status == 401
