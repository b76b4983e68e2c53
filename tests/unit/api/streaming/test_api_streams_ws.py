"""/exec and /attach over the WebSocket channel protocols, for direct clients of the kubelet.

Every subprotocol of the family (channel.k8s.io, base64.channel.k8s.io, v4, v4.base64,
v5 with its close signal, and none at all) with aiohttp's WebSocket client, plus the
kubernetes-asyncio stream client as people use it. The same against a real node is
in tests/integration/test_exec_websocket.py.
"""

from __future__ import annotations

import asyncio
import base64
import json

import aiohttp
import pytest
from kubernetes_asyncio.client import Configuration
from kubernetes_asyncio.stream import WsApiClient

from tests.unit.api.streaming.test_api_streams import EXEC, query, settled
from tests.unit.streams_server import (
    StartServer,
    StreamsProvider,
)
from vkpy.api.streaming.shared import SESSIONS
from vkpy.streams.channels import encode_resize


async def collect(ws: aiohttp.ClientWebSocketResponse, timeout: float = 10.0) -> list[bytes | str]:
    """Every message until the server closes the socket."""
    messages: list[bytes | str] = []

    async def read() -> None:
        async for message in ws:
            if message.type in (aiohttp.WSMsgType.BINARY, aiohttp.WSMsgType.TEXT):
                messages.append(message.data)

    await asyncio.wait_for(read(), timeout)
    return messages


def by_channel(messages: list[bytes | str]) -> dict[int, bytes]:
    out: dict[int, bytes] = {}
    for message in messages:
        if isinstance(message, str):
            channel, payload = int(message[0]), base64.b64decode(message[1:])
        else:
            channel, payload = message[0], message[1:]
        out[channel] = out.get(channel, b"") + payload
    return out


async def test_v4_exec_marks_readiness_then_output_then_status(start: StartServer) -> None:
    provider = StreamsProvider()
    server = await start(provider)
    baseline = len(asyncio.all_tasks())
    async with aiohttp.ClientSession() as http:
        async with http.ws_connect(
            server.url + EXEC + query("sh", "-c", "echo hi; echo oops >&2; exit 3"),
            protocols=["v4.channel.k8s.io"],
            ssl=server.client_ssl,
        ) as ws:
            assert ws.protocol == "v4.channel.k8s.io"
            messages = await collect(ws)
    assert messages[0] == b"\x01"  # an empty stdout message: the streams are ready
    channels = by_channel(messages)
    assert (channels[1], channels[2]) == (b"hi\n", b"oops\n")
    status = json.loads(channels[3])
    assert (status["reason"], status["details"]["causes"][0]["message"]) == ("NonZeroExitCode", "3")
    assert messages[-1][0] == 3  # the status comes last
    await settled(provider, baseline)
    assert SESSIONS.labels("exec", "websocket")._value.get() == 0


async def test_v5_close_signal_ends_stdin_and_closes_output(start: StartServer) -> None:
    server = await start()
    async with aiohttp.ClientSession() as http:
        async with http.ws_connect(
            server.url + EXEC + query("cat", stdin=True),
            protocols=["v5.channel.k8s.io"],
            ssl=server.client_ssl,
        ) as ws:
            await ws.send_bytes(b"\x00first ")
            await ws.send_bytes(b"\x00second")
            await ws.send_bytes(b"\xff\x00")  # close stdin
            messages = await collect(ws)
    assert by_channel(messages)[1] == b"first second"
    assert b"\xff\x01" in messages and b"\xff\x02" in messages  # stdout and stderr closed
    assert messages.index(b"\xff\x01") < len(messages) - 1
    assert json.loads(by_channel(messages)[3]) == {"metadata": {}, "status": "Success"}


@pytest.mark.parametrize("protocol", ["v4.base64.channel.k8s.io", "base64.channel.k8s.io"])
async def test_base64_protocols_use_text_messages(start: StartServer, protocol: str) -> None:
    server = await start()
    async with aiohttp.ClientSession() as http:
        async with http.ws_connect(
            server.url + EXEC + query("cat", stdin=True, stderr=False),
            protocols=[protocol],
            ssl=server.client_ssl,
        ) as ws:
            await ws.send_str("0" + base64.b64encode(b"\x00\xffbinary").decode())
            messages: list[bytes | str] = []
            while by_channel(messages).get(1) != b"\x00\xffbinary":
                message = await asyncio.wait_for(ws.receive(), 5)
                assert message.type == aiohttp.WSMsgType.TEXT
                messages.append(message.data)
    assert messages[0] == "1"  # the readiness message: channel 1, empty payload


async def test_binary_output_survives_base64(start: StartServer) -> None:
    server = await start()
    async with aiohttp.ClientSession() as http:
        async with http.ws_connect(
            server.url + EXEC + query("sh", "-c", "echo out; exit 2"),
            protocols=["v4.base64.channel.k8s.io"],
            ssl=server.client_ssl,
        ) as ws:
            messages = await collect(ws)
    channels = by_channel(messages)
    assert channels[1] == b"out\n"
    assert json.loads(channels[3])["reason"] == "NonZeroExitCode"


@pytest.mark.parametrize("protocols", [["channel.k8s.io"], []])
async def test_version_1_reports_errors_as_text(start: StartServer, protocols: list[str]) -> None:
    server = await start()
    async with aiohttp.ClientSession() as http:
        async with http.ws_connect(
            server.url + EXEC + query("sh", "-c", "exit 4"),
            protocols=protocols,
            ssl=server.client_ssl,
        ) as ws:
            messages = await collect(ws)
    assert by_channel(messages)[3] == b"command terminated with non-zero exit code: 4"


async def test_unsupported_subprotocol_is_refused(start: StartServer) -> None:
    server = await start()
    async with aiohttp.ClientSession() as http:
        with pytest.raises(aiohttp.WSServerHandshakeError) as refused:
            await http.ws_connect(
                server.url + EXEC + query("true"),
                protocols=["v9.channel.k8s.io"],
                ssl=server.client_ssl,
            )
    assert refused.value.status == 403


async def test_tty_resize_over_websocket(start: StartServer) -> None:
    server = await start()
    async with aiohttp.ClientSession() as http:
        async with http.ws_connect(
            server.url + EXEC + query("sh", stdin=True, tty=True),
            protocols=["v4.channel.k8s.io"],
            ssl=server.client_ssl,
        ) as ws:
            await ws.send_bytes(b"\x04" + encode_resize(132, 43))
            await ws.send_bytes(b"\x00stty size\rexit\r")
            messages = await collect(ws)
    assert b"43 132\r\n" in by_channel(messages)[1]


async def test_client_going_away_ends_the_command(start: StartServer) -> None:
    provider = StreamsProvider()
    server = await start(provider)
    baseline = len(asyncio.all_tasks())
    async with aiohttp.ClientSession() as http:
        ws = await http.ws_connect(
            server.url + EXEC + query("sleep", "infinity"),
            protocols=["v5.channel.k8s.io"],
            ssl=server.client_ssl,
        )
        await asyncio.wait_for(provider.started.wait(), 5)
        await ws.close()
    await settled(provider, baseline)
    assert provider.cancelled == ["sleep infinity"]


async def test_attach_over_websocket(start: StartServer) -> None:
    server = await start()
    async with aiohttp.ClientSession() as http:
        async with http.ws_connect(
            server.url + "/attach/ns/web/app?input=1&output=1",
            protocols=["v5.channel.k8s.io"],
            ssl=server.client_ssl,
        ) as ws:
            await ws.send_bytes(b"\x00hello main process")
            await ws.send_bytes(b"\xff\x00")
            messages = await collect(ws)
    assert by_channel(messages)[1] == b"hello main process"


async def test_kubernetes_asyncio_stream_client(start: StartServer) -> None:
    server = await start()
    config = Configuration(host=server.url)
    config.verify_ssl = False
    async with WsApiClient(configuration=config) as client:
        response = await client.request(
            "GET",
            server.url + "/exec/ns/web/app",
            query_params=[
                ("command", ["sh", "-c", "echo $GREETING from the kubelet"]),
                ("output", "1"),
                ("error", "1"),
            ],
        )
        assert response.data.decode() == "hello from the kubelet\n"


async def test_idle_websocket_is_closed_and_the_command_ends(start: StartServer) -> None:
    provider = StreamsProvider()
    server = await start(provider, idle_timeout=0.5)
    async with aiohttp.ClientSession() as http:
        async with http.ws_connect(
            server.url + EXEC + query("sleep", "infinity"),
            protocols=["v4.channel.k8s.io"],
            ssl=server.client_ssl,
            autoping=False,
        ) as ws:
            await collect(ws)
    assert provider.cancelled == ["sleep infinity"]
