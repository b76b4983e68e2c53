"""The kubelet API's connection bounds, seen from raw TCP and TLS clients: a client
that finishes TLS and says nothing, one that trickles its request head, one that
never finishes the handshake, and one that idles between requests are all closed
by their deadline (set to fractions of a second here); connections over the caps
(total, per client address) are reset at once; and what an unauthenticated client
can learn from an answer: no `Server` header, no echo of a bad request line.
"""

from __future__ import annotations

import asyncio
import contextlib
import ssl
import time
from collections.abc import AsyncIterator
from dataclasses import replace

import pytest

from tests.unit.api.test_api_server import ScriptedProvider, StartApi, start_api  # noqa: F401
from vkpy.api.listener import MAX_HEADER_BYTES
from vkpy.api.settings import ConnectionLimits

FAST = ConnectionLimits(
    handshake_timeout=0.5,
    request_header_timeout=0.5,
    idle_timeout=0.8,
    max_connections=20,
    max_connections_per_client=6,
)
HEALTHZ = b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n"


def client_context() -> ssl.SSLContext:
    context = ssl.create_default_context()
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE
    return context


Connection = tuple[asyncio.StreamReader, asyncio.StreamWriter]


@contextlib.asynccontextmanager
async def tls(port: int, source: str = "127.0.0.1") -> AsyncIterator[Connection]:
    reader, writer = await asyncio.open_connection(
        "127.0.0.1", port, ssl=client_context(), local_addr=(source, 0)
    )
    try:
        yield reader, writer
    finally:
        writer.close()
        with contextlib.suppress(Exception):
            await writer.wait_closed()


async def closed_after(reader: asyncio.StreamReader, limit: float) -> float:
    """Seconds until the server closes the connection (fails after `limit`)."""
    started = time.monotonic()
    with contextlib.suppress(ConnectionError, ssl.SSLError):
        while await asyncio.wait_for(reader.read(65536), limit):
            pass
    return time.monotonic() - started


async def answer(
    reader: asyncio.StreamReader, writer: asyncio.StreamWriter, request: bytes
) -> bytes:
    writer.write(request)
    head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 5)
    length = 0
    for line in head.split(b"\r\n"):
        if line.lower().startswith(b"content-length:"):
            length = int(line.split(b":", 1)[1])
    return head + await asyncio.wait_for(reader.readexactly(length), 5)


async def test_silent_client_after_tls_is_closed_by_the_header_deadline(
    start_api: StartApi,  # noqa: F811
) -> None:
    api = await start_api(ScriptedProvider(), limits=FAST)
    async with tls(api.server.port) as (reader, _):
        assert 0.3 < await closed_after(reader, 10) < 5
    assert api.server.gate is not None
    await asyncio.sleep(0.1)
    assert api.server.gate.total == 0


async def test_trickled_request_head_is_cut_at_the_deadline(start_api: StartApi) -> None:  # noqa: F811
    api = await start_api(ScriptedProvider(), limits=FAST)
    async with tls(api.server.port) as (reader, writer):

        async def trickle() -> None:
            for byte in HEALTHZ[:-4]:
                writer.write(bytes([byte]))
                await asyncio.sleep(0.1)

        task = asyncio.create_task(trickle())
        try:
            assert await closed_after(reader, 10) < 5
        finally:
            task.cancel()
            with contextlib.suppress(BaseException):
                await task


async def test_unfinished_handshake_is_dropped(start_api: StartApi) -> None:  # noqa: F811
    api = await start_api(ScriptedProvider(), limits=FAST)
    reader, writer = await asyncio.open_connection("127.0.0.1", api.server.port)
    writer.write(b"\x16\x03\x01")  # the start of a ClientHello, never finished
    assert 0.3 < await closed_after(reader, 10) < 5
    writer.close()


async def test_idle_keep_alive_is_closed_and_a_request_in_progress_is_not(
    start_api: StartApi,  # noqa: F811
) -> None:
    provider = ScriptedProvider(lines=[b"a\n"])
    api = await start_api(provider, limits=FAST)
    async with tls(api.server.port) as (reader, writer):
        assert b"200 OK" in await answer(reader, writer, HEALTHZ)
        assert await closed_after(reader, 10) < 5
    async with tls(api.server.port) as (reader, writer):
        writer.write(b"GET /containerLogs/ns/web/app?follow=true HTTP/1.1\r\nHost: x\r\n\r\n")
        await asyncio.wait_for(reader.readuntil(b"a\n"), 5)
        await asyncio.sleep(2 * FAST.idle_timeout)  # both deadlines long past
        await provider.more.put(b"still here\n")
        assert b"still here" in await asyncio.wait_for(reader.readuntil(b"here\n"), 5)


async def test_connections_over_the_caps_are_reset_at_once(start_api: StartApi) -> None:  # noqa: F811
    api = await start_api(
        ScriptedProvider(), limits=replace(FAST, request_header_timeout=60, idle_timeout=60)
    )
    port = api.server.port
    async with contextlib.AsyncExitStack() as stack:
        for _ in range(FAST.max_connections_per_client):
            await stack.enter_async_context(tls(port))
        with pytest.raises((ConnectionError, ssl.SSLError, asyncio.IncompleteReadError)):
            async with tls(port) as (reader, writer):
                await answer(reader, writer, HEALTHZ)
        # another client address still gets in
        async with tls(port, source="127.0.0.2") as (reader, writer):
            assert b"200 OK" in await answer(reader, writer, HEALTHZ)
        for number in range(3, 3 + 4):
            for _ in range(3):
                await stack.enter_async_context(tls(port, source=f"127.0.0.{number}"))
        assert api.server.gate is not None
        assert api.server.gate.total == FAST.max_connections - 2
        await stack.enter_async_context(tls(port, source="127.0.0.9"))
        await stack.enter_async_context(tls(port, source="127.0.0.9"))
        with pytest.raises((ConnectionError, ssl.SSLError, asyncio.IncompleteReadError)):
            async with tls(port, source="127.0.0.10") as (reader, writer):
                await answer(reader, writer, HEALTHZ)
    status, _ = await api.get("/metrics")
    assert status == 200


async def test_no_server_header_and_no_echo_of_a_bad_request(start_api: StartApi) -> None:  # noqa: F811
    api = await start_api(
        ScriptedProvider(), anonymous_auth=False, authorization_mode="Webhook", client=object()
    )
    async with tls(api.server.port) as (reader, writer):
        unauthorized = await answer(reader, writer, HEALTHZ)
    assert unauthorized.startswith(b"HTTP/1.1 401")
    assert b"\r\nserver:" not in unauthorized.lower()
    secret = b"A" * (MAX_HEADER_BYTES + 100)  # longer than any request line taken
    async with tls(api.server.port) as (reader, writer):
        refused = await answer(reader, writer, b"GET /" + secret + b" HTTP/1.1\r\nHost: x\r\n\r\n")
    status_line = refused.split(b"\r\n", 1)[0]
    assert status_line.split(b" ", 1)[1] in (
        b"400 Bad Request",
        b"431 Request Header Fields Too Large",
    )
    assert b"AAAA" not in refused
    assert b"\r\nserver:" not in refused.lower()
