"""WebSocket protocol errors from a client, on the kubelet API: an unmasked frame closes
the connection with 1002 (RFC 6455 section 5.1) through the real server and its
listener; a message on a channel the session does not read, and a resize message
that does not decode, are said in vkpy's log (once per session and channel), never
dropped without a word.
"""

from __future__ import annotations

import asyncio
import base64
import logging
import os
import ssl

import aiohttp
import pytest

from tests.unit.api.streaming.test_api_streams import EXEC, query
from tests.unit.api.test_api_server import StartApi, start_api  # noqa: F401
from tests.unit.streams_server import StartServer, StreamsProvider

V4 = "v4.channel.k8s.io"


def frame(payload: bytes, *, masked: bool, opcode: int = 0x2) -> bytes:
    assert len(payload) < 126
    if not masked:
        return bytes([0x80 | opcode, len(payload)]) + payload
    key = os.urandom(4)
    body = bytes(b ^ key[i % 4] for i, b in enumerate(payload))
    return bytes([0x80 | opcode, 0x80 | len(payload)]) + key + body


async def read_frame(reader: asyncio.StreamReader) -> tuple[int, bytes]:
    first, second = await asyncio.wait_for(reader.readexactly(2), 5)
    length = second & 0x7F
    if length == 126:
        length = int.from_bytes(await reader.readexactly(2), "big")
    elif length == 127:
        length = int.from_bytes(await reader.readexactly(8), "big")
    return first & 0x0F, await asyncio.wait_for(reader.readexactly(length), 5)


async def test_unmasked_client_frame_closes_with_1002(start_api: StartApi) -> None:  # noqa: F811
    api = await start_api(StreamsProvider())
    context = ssl.create_default_context()
    context.check_hostname, context.verify_mode = False, ssl.CERT_NONE
    reader, writer = await asyncio.open_connection("127.0.0.1", api.server.port, ssl=context)
    key = base64.b64encode(os.urandom(16)).decode()
    writer.write(
        (
            "GET /attach/ns/web/app?input=1&output=1 HTTP/1.1\r\nHost: x\r\n"
            "Upgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Version: 13\r\n"
            f"Sec-WebSocket-Key: {key}\r\nSec-WebSocket-Protocol: {V4}\r\n\r\n"
        ).encode()
    )
    head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 5)
    assert head.startswith(b"HTTP/1.1 101")
    assert await read_frame(reader) == (0x2, b"\x01")  # ready: an empty stdout message
    writer.write(frame(b"\x00hi", masked=True))
    assert await read_frame(reader) == (0x2, b"\x01hi")  # a masked frame is served
    writer.write(frame(b"\x00no mask", masked=False))
    opcode, payload = await read_frame(reader)
    assert (opcode, int.from_bytes(payload[:2], "big")) == (0x8, 1002)
    assert await asyncio.wait_for(reader.read(), 5) == b""
    writer.close()


def warnings(caplog: pytest.LogCaptureFixture, text: str) -> list[logging.LogRecord]:
    return [r for r in caplog.records if r.levelno >= logging.WARNING and text in r.getMessage()]


async def test_messages_on_channels_nobody_reads_are_logged_once(
    start: StartServer, caplog: pytest.LogCaptureFixture
) -> None:
    server = await start()
    async with aiohttp.ClientSession() as http:
        async with http.ws_connect(
            server.url + EXEC + query("cat", stdin=True),
            protocols=[V4],
            ssl=server.client_ssl,
        ) as ws:
            for _ in range(3):
                await ws.send_bytes(b"\x09stray")
                await ws.send_bytes(b"\x04" + b'{"Width":80,"Height":24}')  # no tty: no resize
            await ws.send_bytes(b"\x00done")
            await ws.receive()  # ready
            await ws.receive()  # done
    logged = warnings(caplog, "channel the session does not read")
    assert sorted(r.__dict__["channel"] for r in logged) == [4, 9]


async def test_a_resize_message_that_does_not_decode_is_logged(
    start: StartServer, caplog: pytest.LogCaptureFixture
) -> None:
    provider = StreamsProvider()
    server = await start(provider)
    async with aiohttp.ClientSession() as http:
        async with http.ws_connect(
            server.url + EXEC + query("cat", stdin=True, tty=True),
            protocols=[V4],
            ssl=server.client_ssl,
        ) as ws:
            await ws.receive()  # ready
            await ws.send_bytes(b'\x04{"Width": "wide"}')
            await ws.send_bytes(b"\x04" + b'{"Width":80,"Height":24}')
            await ws.send_bytes(b"\x00x")
            await ws.receive()
    assert len(warnings(caplog, "resize")) == 1
