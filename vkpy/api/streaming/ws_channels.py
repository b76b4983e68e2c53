"""A WebSocket connection speaking one of the channel.k8s.io subprotocols, as an asyncio session.

aiohttp does the WebSocket framing (and answers pings); vkpy.streams.channels does
the Kubernetes layer inside each message. This module joins them for the exec,
attach and port-forward endpoints: one reader task demultiplexes the client's
messages into a `ByteQueue` per input channel (waiting while a queue is full, so a
slow backend slows the client down instead of filling memory), `send` writes a
channel's bytes (in messages of at most 32 KiB), and `lost` resolves when the client
closes, breaks the protocol, or stays silent past the idle timeout. A message on a
channel the session has no input for is ignored (as the kubelet does) and said once
in the log; a channel may have a check (resize: does it decode?) whose failure is
the end of that channel's input.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable, Mapping, Sequence

from aiohttp import WSMsgType, web

from vkpy.api.state import plain
from vkpy.api.streaming.shared import ByteQueue, IdleTimer, StreamSettings
from vkpy.streams import channels

log = logging.getLogger(__name__)

MAX_MESSAGE_PAYLOAD = 32 * 1024
"""Outgoing channel payloads are split into messages of at most this many bytes."""
MAX_MESSAGE_SIZE = 4 * 1024 * 1024
"""Largest message accepted from a client."""


def choose_protocol(request: web.Request, supported: Sequence[str]) -> str | web.Response:
    """The subprotocol to speak out of those the client offers, or the 403 the kubelet
    answers when it supports none of them."""
    offered = request.headers.getall("Sec-WebSocket-Protocol", ())
    protocol = channels.negotiate(offered, supported)
    if protocol is not None:
        return protocol
    return plain(
        403,
        f"requested protocol(s) are not supported: {channels.split_offered(offered)}; "
        f"supports {[p for p in supported if p]}",
    )


async def prepare_websocket(request: web.Request, protocol: str) -> web.WebSocketResponse:
    """Complete the WebSocket handshake, selecting `protocol` ("" for none)."""
    ws = web.WebSocketResponse(
        protocols=(protocol,) if protocol else (),
        autoping=True,
        max_msg_size=MAX_MESSAGE_SIZE,
    )
    await ws.prepare(request)
    return ws


class ChannelSession:
    """One channel-protocol WebSocket; see the module docstring."""

    def __init__(
        self,
        ws: web.WebSocketResponse,
        protocol: str,
        settings: StreamSettings,
        inputs: Mapping[int, ByteQueue],
        *,
        what: str = "websocket",
        checks: Mapping[int, Callable[[bytes], bool]] | None = None,
    ) -> None:
        self._ws = ws
        self.protocol = protocol
        self._info = channels.protocol_info(protocol)
        self._settings = settings
        self._inputs = inputs
        self._checks = checks or {}
        self._unread: set[int] = set()
        self._what = what
        self.lost: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self.lost_reason = ""
        self._idle = IdleTimer(settings.idle_timeout, lambda: self._lose("idle timeout"))
        self._reader = asyncio.create_task(self._read(), name=f"ws-reader {what}")

    @property
    def close_signal(self) -> bool:
        return self._info.close_signal

    async def _read(self) -> None:
        reason = "client closed the connection"
        try:
            while True:
                message = await self._ws.receive()
                if message.type in (WSMsgType.CLOSE, WSMsgType.CLOSING, WSMsgType.CLOSED):
                    break
                if message.type == WSMsgType.ERROR:
                    reason = f"websocket error: {message.data}"
                    break
                if message.type not in (WSMsgType.TEXT, WSMsgType.BINARY):
                    continue
                self._idle.touch()
                await self._deliver(message.data)
        except channels.ProtocolError as error:
            reason = f"protocol error: {error}"
            log.warning(
                "channel protocol error from the client",
                extra={"conn": self._what, "error": str(error)},
            )
        except ConnectionError as error:
            reason = f"connection error: {error}"
        finally:
            self._lose(reason)

    async def _deliver(self, data: bytes | str) -> None:
        decoded = channels.decode(self.protocol, data)
        if decoded is None:
            return
        if isinstance(decoded, channels.CloseChannel):
            queue = self._inputs.get(decoded.channel)
            if queue is not None:
                queue.end()
            return
        queue = self._inputs.get(decoded.channel)
        if queue is None:
            self._not_read(decoded.channel)
            return
        check = self._checks.get(decoded.channel)
        if check is not None and not queue.ended and not check(decoded.data):
            queue.discard()
            return
        queue.feed(decoded.data)
        await queue.wait_for_room(self._settings.max_buffered)

    def _not_read(self, channel: int) -> None:
        """A message for a channel this session has no input for: ignored, as the
        kubelet does, and said once per channel."""
        if channel in self._unread:
            return
        self._unread.add(channel)
        log.warning(
            "message on a channel the session does not read: ignored",
            extra={"conn": self._what, "channel": channel},
        )

    def _lose(self, reason: str) -> None:
        if self.lost.done():
            return
        self.lost_reason = reason
        self.lost.set_result(None)
        self._idle.cancel()
        for queue in self._inputs.values():
            queue.end()

    async def send(self, channel: int, data: bytes) -> bool:
        """Send `data` on `channel` (an empty message too); False once the socket is closed."""
        view = memoryview(data)
        start = 0
        while True:
            if self._ws.closed:
                return False
            chunk = bytes(view[start : start + MAX_MESSAGE_PAYLOAD])
            message = channels.encode(self.protocol, channel, chunk)
            try:
                if isinstance(message, str):
                    await self._ws.send_str(message)
                else:
                    await self._ws.send_bytes(message)
            except (ConnectionError, RuntimeError):
                return False
            self._idle.touch()
            start += MAX_MESSAGE_PAYLOAD
            if start >= len(view):
                return True

    async def send_close(self, channel: int) -> None:
        """v5: tell the client nothing more comes on `channel` (no-op for older versions)."""
        if not self._info.close_signal or self._ws.closed:
            return
        with contextlib.suppress(ConnectionError, RuntimeError):
            await self._ws.send_bytes(channels.encode_close(self.protocol, channel))

    async def close(self) -> None:
        """Close the WebSocket (normal closure) and stop reading."""
        with contextlib.suppress(ConnectionError, RuntimeError, TimeoutError):
            async with asyncio.timeout(self._settings.close_grace):
                await self._ws.close()
        self._lose("closed")
        if not self._reader.done():
            self._reader.cancel()
        await asyncio.wait({self._reader})
        for queue in self._inputs.values():
            queue.discard()
