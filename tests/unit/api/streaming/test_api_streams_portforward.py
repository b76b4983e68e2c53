"""/portForward over SPDY/3.1 (portforward.k8s.io) and over the WebSocket channel protocols.

Pairing of data and error streams by requestid (and by stream id for old clients),
several forwarded connections on one SPDY connection at once, errors written only on
real failure, incomplete pairs timed out, a client that goes away, and the WebSocket
form with its port-prefixed channels.
"""

from __future__ import annotations

import asyncio

import aiohttp
import pytest

from tests.stream_clients import SpdyClient
from tests.unit.streams_server import (
    REFUSED_PORT,
    BareProvider,
    StartServer,
    StreamsProvider,
    StreamsServer,
)

PF = "/portForward/ns/web"
PROTOCOL = "portforward.k8s.io"


async def connect(server: StreamsServer, path: str = PF) -> SpdyClient:
    client, answer = await SpdyClient.connect(
        "127.0.0.1", server.port, path, protocols=[PROTOCOL], ssl_context=server.client_ssl
    )
    assert client is not None, (answer.status, answer.body)
    assert answer.header("X-Stream-Protocol-Version") == PROTOCOL
    return client


def open_pair(client: SpdyClient, port: int, request_id: str | None) -> tuple[int, int]:
    """What kubectl does per accepted local connection: error stream (FIN'd), data stream."""
    extra = {"requestid": request_id} if request_id is not None else {}
    error = client.open({"streamtype": "error", "port": str(port), **extra}, fin=True)
    data = client.open({"streamtype": "data", "port": str(port), **extra})
    return error, data


async def test_concurrent_connections_on_one_session(start: StartServer) -> None:
    server = await start()
    client = await connect(server)
    pairs = [open_pair(client, 8080, str(i)) for i in range(5)]
    for i, (_, data) in enumerate(pairs):
        await client.send(data, f"GET /conn{i} HTTP/1.1\r\nHost: x\r\n\r\n".encode())
    for i, (error, data) in enumerate(pairs):
        answer = await client.wait_stream(data)
        assert answer.startswith(b"HTTP/1.0 200 OK\r\n")
        assert answer.endswith(f"sim pod ns/web port 8080 path /conn{i}\n".encode())
        assert await client.wait_stream(error) == b""  # nothing written on success
    _, echo = open_pair(client, 9000, "echo")
    await client.send(echo, b"\x00\x01 not http")
    assert await client.wait_data(echo, 11) == b"\x00\x01 not http"
    await client.send(echo, b"", fin=True)
    assert await client.wait_stream(echo) == b"\x00\x01 not http"
    await client.close()


async def test_old_clients_pair_streams_by_id(start: StartServer) -> None:
    server = await start()
    client = await connect(server)
    _, data = open_pair(client, 8080, None)
    await client.send(data, b"GET /legacy HTTP/1.0\r\n\r\n")
    assert (await client.wait_stream(data)).endswith(b"path /legacy\n")
    await client.close()


async def test_refused_port_is_reported_on_the_error_stream(start: StartServer) -> None:
    server = await start()
    client = await connect(server)
    error, data = open_pair(client, REFUSED_PORT, "0")
    message = (await client.wait_stream(error)).decode()
    assert message == (
        "error forwarding port 1 to pod web_ns, uid uid-web: "
        "dial tcp 127.0.0.1:1: connect: connection refused"
    )
    assert await client.wait_stream(data) == b""
    await client.close()


async def test_a_backend_without_port_forward_says_so(start: StartServer) -> None:
    server = await start(BareProvider())
    client = await connect(server)
    error, _ = open_pair(client, 8080, "0")
    assert (await client.wait_stream(error)).endswith(
        b"the bare backend does not support port forwarding"
    )
    await client.close()


async def test_incomplete_pair_times_out(start: StartServer) -> None:
    server = await start(stream_creation_timeout=0.3)
    client = await connect(server)
    error = client.open({"streamtype": "error", "port": "8080", "requestid": "7"}, fin=True)
    assert await client.wait_stream(error) == b"timed out waiting for streams of request 7"
    _, data = open_pair(client, 8080, "8")  # the session goes on
    await client.send(data, b"GET /after HTTP/1.0\r\n\r\n")
    assert (await client.wait_stream(data)).endswith(b"path /after\n")
    await client.close()


async def test_wrong_protocol_is_refused(start: StartServer) -> None:
    server = await start()
    client, answer = await SpdyClient.connect(
        "127.0.0.1", server.port, PF, protocols=["v4.channel.k8s.io"], ssl_context=server.client_ssl
    )
    assert client is None
    assert answer.status == 403
    assert answer.header_values("X-Accepted-Stream-Protocol-Versions") == [PROTOCOL]


async def test_client_going_away_ends_the_forwarded_connections(start: StartServer) -> None:
    provider = StreamsProvider()
    server = await start(provider)
    baseline = len(asyncio.all_tasks())
    client = await connect(server)
    _, data = open_pair(client, 9000, "0")
    await client.send(data, b"echo me")
    assert await client.wait_data(data, 7) == b"echo me"
    client.abort()
    await client.close()
    loop = asyncio.get_running_loop()
    deadline = loop.time() + 5
    while (provider.forwards or len(asyncio.all_tasks()) > baseline) and loop.time() < deadline:
        await asyncio.sleep(0.02)
    assert provider.forwards == 0
    assert provider.cancelled == ["port 9000"]
    assert len(asyncio.all_tasks()) <= baseline


async def test_websocket_port_forward(start: StartServer) -> None:
    server = await start()
    async with aiohttp.ClientSession() as http:
        async with http.ws_connect(
            server.url + PF + "?port=8080&port=9000",
            protocols=["v4.channel.k8s.io"],
            ssl=server.client_ssl,
        ) as ws:
            first = [await asyncio.wait_for(ws.receive_bytes(), 5) for _ in range(4)]
            assert first == [b"\x00\x90\x1f", b"\x01\x90\x1f", b"\x02\x28\x23", b"\x03\x28\x23"]
            await ws.send_bytes(b"\x00GET /ws HTTP/1.0\r\n\r\n")
            await ws.send_bytes(b"\x02ping")
            got: dict[int, bytes] = {}
            while not got.get(0, b"").endswith(b"path /ws\n") or got.get(2) != b"ping":
                message = await asyncio.wait_for(ws.receive_bytes(), 5)
                got[message[0]] = got.get(message[0], b"") + message[1:]
            assert 1 not in got and 3 not in got


async def test_websocket_port_forward_errors(start: StartServer) -> None:
    server = await start()
    async with aiohttp.ClientSession() as http:
        async with http.ws_connect(
            server.url + PF + f"?port={REFUSED_PORT}", ssl=server.client_ssl
        ) as ws:
            messages = []
            async for message in ws:
                messages.append(message.data)
    assert messages[:2] == [b"\x00\x01\x00", b"\x01\x01\x00"]
    assert messages[2].startswith(b"\x01error forwarding port 1 to pod web_ns")
    async with aiohttp.ClientSession() as http:
        with pytest.raises(aiohttp.WSServerHandshakeError) as refused:
            await http.ws_connect(server.url + PF, ssl=server.client_ssl)
        assert refused.value.status == 400
