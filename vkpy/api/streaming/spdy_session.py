"""An asyncio session around the sans-IO SPDY/3.1 codec, serving one upgraded connection.

`vkpy.streams.spdy.SpdyConnection` turns bytes into events and calls into bytes; this
module owns the rest: it is fed by the connection's data callbacks (vkpy.api.streaming.upgrade),
writes what the codec queues, answers every stream the client opens with an empty
SYN_REPLY straight away (as the kubelet's SPDY server does, so a client never waits
on us), and hands the streams to the endpoint (`accept`). Each stream's input is a
`ByteQueue`; the bytes queued over the whole connection are bounded, and reading
from the socket pauses while the backend is behind (SPDY as Kubernetes speaks it has
no working flow control, so pausing the socket is the only back-pressure there is).

The session is "lost" (`lost` resolves) when the client hangs up, breaks the
protocol, or stays silent past the idle timeout; endpoints watch `lost` to cancel
what they run for the client. `close` ends it politely: GOAWAY, then wait a little
for the client to hang up first, so no unread input turns our close into a reset.
"""

from __future__ import annotations

import asyncio
import collections
import logging
from collections.abc import Mapping
from typing import Protocol

from vkpy.api.streaming.shared import ByteQueue, IdleTimer, StreamSettings
from vkpy.streams.remotecommand import HEADER_STREAM_TYPE
from vkpy.streams.spdy import (
    DataReceived,
    Event,
    GoAwayReceived,
    HeadersReceived,
    ProtocolError,
    RstStatus,
    SpdyConnection,
    SpdyError,
    SpdyLimits,
    StreamOpened,
    StreamReset,
)

log = logging.getLogger(__name__)


class FrameIO(Protocol):
    """The byte pipe under a session (an upgraded HTTP connection, or a test double)."""

    def write(self, data: bytes) -> None:
        """Queue bytes for the client; silently dropped once the connection is gone."""

    async def drain(self) -> None:
        """Wait until the write buffer is below its high-water mark (or the peer is gone)."""

    def pause_reading(self) -> None: ...

    def resume_reading(self) -> None: ...


class SpdyStream:
    """One stream the client opened: its headers, its input, and writing back on it."""

    def __init__(self, session: SpdySession, stream_id: int, headers: Mapping[str, str]) -> None:
        self.id = stream_id
        self.headers = headers
        self.input = ByteQueue(session._consumed)
        self.reset_by_peer = False
        self._session = session

    @property
    def stream_type(self) -> str:
        return self.headers.get(HEADER_STREAM_TYPE, "")

    async def read(self) -> bytes:
        """The next bytes the client sent; b"" after its FIN, a reset or a lost session."""
        return await self.input.read()

    def discard(self) -> None:
        """Input on this stream will never be read; drop it instead of buffering it."""
        self.input.discard()

    @property
    def writable(self) -> bool:
        return self._session.can_send(self.id)

    async def write(self, data: bytes) -> bool:
        """Send `data` (in frames of at most 32 KiB); False if the stream or session is closed."""
        return await self._session.send(self.id, data, fin=False)

    async def close(self) -> None:
        """Half-close our side (FIN); a no-op if it is closed already."""
        await self._session.send(self.id, b"", fin=True)

    def reset(self, status: int = RstStatus.CANCEL) -> None:
        self._session.reset(self.id, status)


class SpdySession:
    """One SPDY/3.1 connection, server side. See the module docstring."""

    def __init__(self, io: FrameIO, settings: StreamSettings, *, what: str = "spdy") -> None:
        self._io = io
        self._settings = settings
        self._what = what
        self._conn = SpdyConnection(client_side=False, limits=SpdyLimits())
        self._streams: dict[int, SpdyStream] = {}
        self._incoming: collections.deque[SpdyStream] = collections.deque()
        self._incoming_ready = asyncio.Event()
        self._buffered = 0
        self._paused = False
        self._goaway_received = False
        self._eof = asyncio.Event()
        self.lost: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self.lost_reason = ""
        self._idle = IdleTimer(settings.idle_timeout, self._on_idle)

    # -- fed by the connection (synchronous callbacks) ---------------------------------

    def feed_data(self, data: bytes) -> None:
        if self.lost.done():
            return
        self._idle.touch()
        try:
            events = self._conn.receive_data(data)
        except ProtocolError as error:
            log.warning(
                "SPDY protocol error from the client",
                extra={"conn": self._what, "error": str(error)},
            )
            self._flush()
            self._lose("protocol error")
            return
        for event in events:
            self._dispatch(event)
        self._flush()

    def feed_eof(self) -> None:
        self._eof.set()
        self._lose("client closed the connection")

    def _dispatch(self, event: Event) -> None:
        if isinstance(event, StreamOpened):
            self._open(event)
        elif isinstance(event, DataReceived):
            stream = self._streams.get(event.stream_id)
            if stream is not None:
                self._received(stream.input.feed(event.data))
                if event.fin:
                    stream.input.end()
                    self._forget_if_closed(stream)
        elif isinstance(event, StreamReset):
            stream = self._streams.pop(event.stream_id, None)
            if stream is not None:
                stream.reset_by_peer = True
                stream.input.end()
        elif isinstance(event, HeadersReceived):
            stream = self._streams.get(event.stream_id)
            if stream is not None and event.fin:
                stream.input.end()
                self._forget_if_closed(stream)
        elif isinstance(event, GoAwayReceived):
            self._goaway_received = True
            self._incoming_ready.set()
        # PING is echoed by the codec; SETTINGS and WINDOW_UPDATE are ignored on purpose.

    def _open(self, event: StreamOpened) -> None:
        stream = SpdyStream(self, event.stream_id, dict(event.headers))
        self._streams[event.stream_id] = stream
        if event.fin:
            stream.input.end()
        if self._conn.can_send(event.stream_id):
            self._conn.reply(event.stream_id)
        self._incoming.append(stream)
        self._incoming_ready.set()

    def _forget_if_closed(self, stream: SpdyStream) -> None:
        if stream.input.ended and not self._conn.can_send(stream.id):
            self._streams.pop(stream.id, None)

    def _received(self, count: int) -> None:
        self._buffered += count
        if not self._paused and self._buffered > self._settings.max_buffered:
            self._paused = True
            self._io.pause_reading()

    def _consumed(self, count: int) -> None:
        self._buffered -= count
        if self._paused and self._buffered <= self._settings.max_buffered // 4:
            self._paused = False
            self._io.resume_reading()

    def _flush(self) -> None:
        out = self._conn.data_to_send()
        if out:
            self._idle.touch()
            self._io.write(out)

    def _on_idle(self) -> None:
        log.info("closing an idle stream connection", extra={"conn": self._what})
        self._conn.goaway()
        self._flush()
        self._lose("idle timeout")

    def _lose(self, reason: str) -> None:
        if self.lost.done():
            return
        self.lost_reason = reason
        self.lost.set_result(None)
        self._idle.cancel()
        for stream in self._streams.values():
            stream.input.end()
        self._incoming_ready.set()
        if self._paused:
            self._paused = False
            self._io.resume_reading()

    # -- used by endpoints --------------------------------------------------------------

    async def accept(self) -> SpdyStream | None:
        """The next stream the client opened (already replied to); None when no more
        will come (client gone, GOAWAY)."""
        while not self._incoming:
            if self.lost.done() or self._goaway_received:
                return None
            self._incoming_ready.clear()
            await self._incoming_ready.wait()
        return self._incoming.popleft()

    def can_send(self, stream_id: int) -> bool:
        return not self.lost.done() and self._conn.can_send(stream_id)

    async def send(self, stream_id: int, data: bytes, *, fin: bool) -> bool:
        if not self.can_send(stream_id):
            return False
        try:
            self._conn.send_data(stream_id, data, fin=fin)
        except SpdyError:
            return False
        self._flush()
        if fin:
            stream = self._streams.get(stream_id)
            if stream is not None:
                self._forget_if_closed(stream)
        await self._io.drain()
        return True

    def reset(self, stream_id: int, status: int = RstStatus.CANCEL) -> None:
        stream = self._streams.pop(stream_id, None)
        if stream is not None:
            stream.input.discard()
        if not self.lost.done():
            self._conn.reset(stream_id, status)
            self._flush()

    async def close(self) -> None:
        """GOAWAY, then give the client `close_grace` seconds to hang up first."""
        if not self.lost.done():
            self._conn.goaway()
            self._flush()
            await self._io.drain()
            try:
                async with asyncio.timeout(self._settings.close_grace):
                    await self._eof.wait()
            except TimeoutError:
                log.debug(
                    "client kept the connection open after GOAWAY", extra={"conn": self._what}
                )
        self._lose("closed")
        for stream in self._streams.values():
            stream.input.discard()
        self._streams.clear()
        self._incoming.clear()
