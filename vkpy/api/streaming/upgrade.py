"""Taking over an aiohttp HTTP/1.1 connection after `101 Switching Protocols` to SPDY/3.1.

aiohttp upgrades connections to WebSocket only; for anything else its HTTP parser
would read the next bytes as another request. What it does offer is the hook its own
WebSocket support uses: the connection's protocol object (`request.protocol`) sends
every byte that arrives after `set_parser(parser)` to `parser.feed_data(data)` and
the end of the connection to `parser.feed_eof()`. So the upgrade is:

1. install a parser adapter that forwards bytes to our receiver (the SPDY session)
   BEFORE the 101 goes out, so not a byte the client sends after it can reach the
   HTTP parser (a client sends nothing before it has read the 101: Go's SPDY client
   reads the response first, and PROTOCOLS.md requires it);
2. send the 101 (`Connection: Upgrade`, `Upgrade: SPDY/3.1`, the chosen
   `X-Stream-Protocol-Version`) through a `StreamResponse` marked `force_close`, so
   that when the handler returns aiohttp closes the connection instead of waiting
   for another request;
3. write frames straight to the transport, waiting on aiohttp's drain (its protocol
   tracks the transport's pause/resume writing) for back-pressure; pause and resume
   reading on the transport for back-pressure the other way.

The handler keeps running for the whole session; returning from it closes the
connection. The server's keep-alive and request timeouts do not apply to a running
handler, so the session's own idle timeout is the only one.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Mapping
from typing import Protocol

from aiohttp import web

log = logging.getLogger(__name__)

SPDY_31 = "SPDY/3.1"


class Receiver(Protocol):
    """Where the bytes of the upgraded connection go."""

    def feed_data(self, data: bytes) -> None: ...

    def feed_eof(self) -> None: ...


class _ParserAdapter:
    """The shape aiohttp's RequestHandler.set_parser expects (that of its WebSocketReader)."""

    def __init__(self, receiver: Receiver) -> None:
        self._receiver = receiver

    def feed_data(self, data: bytes) -> tuple[bool, bytes]:
        self._receiver.feed_data(bytes(data))
        return False, b""

    def feed_eof(self) -> None:
        self._receiver.feed_eof()


def is_spdy_upgrade(request: web.BaseRequest) -> bool:
    """`Connection: Upgrade` and `Upgrade: SPDY/3.1` (case-insensitive, as the kubelet)."""
    connection = {
        token.strip().lower()
        for value in request.headers.getall("Connection", ())
        for token in value.split(",")
    }
    return "upgrade" in connection and request.headers.get("Upgrade", "").lower() == SPDY_31.lower()


def is_websocket_upgrade(request: web.BaseRequest) -> bool:
    return request.headers.get("Upgrade", "").lower() == "websocket"


class UpgradedConnection:
    """The raw connection under a request, once it has been upgraded (a `FrameIO`)."""

    def __init__(self, request: web.BaseRequest) -> None:
        self._request = request
        self.upgraded = False

    def _transport(self) -> asyncio.Transport | None:
        transport = self._request.transport
        if transport is None or transport.is_closing():
            return None
        return transport

    def write(self, data: bytes) -> None:
        transport = self._transport()
        if transport is not None:
            transport.write(data)

    async def drain(self) -> None:
        if self._transport() is None:
            return
        with contextlib.suppress(ConnectionError, RuntimeError):
            await self._request.writer.drain()

    def pause_reading(self) -> None:
        transport = self._transport()
        if transport is not None:
            transport.pause_reading()

    def resume_reading(self) -> None:
        transport = self._transport()
        if transport is not None:
            transport.resume_reading()

    async def upgrade(self, receiver: Receiver, headers: Mapping[str, str]) -> web.StreamResponse:
        """Route every later byte to `receiver` and send `101 Switching Protocols`.

        Return the response for the handler to return when the session is over."""
        handler = self._request.protocol
        set_parser = getattr(handler, "set_parser", None)
        if set_parser is None:  # pragma: no cover - aiohttp without the hook
            raise RuntimeError("this aiohttp version cannot hand a connection over")
        set_parser(_ParserAdapter(receiver))
        response = web.StreamResponse(
            status=101,
            reason="Switching Protocols",
            headers={"Connection": "Upgrade", "Upgrade": SPDY_31, **headers},
        )
        response.force_close()
        await response.prepare(self._request)
        self.upgraded = True
        return response
