"""The pieces of a `StreamIO` that exec, attach and port-forward hand to backends.

A backend reads the client's input through a `ByteSource` and writes output through
`ByteSink`s, whatever the transport: `QueueSource` reads a stream's or channel's
input queue, `SpdySink` writes DATA frames on a SPDY stream, `ChannelSink` messages
on one WebSocket channel. Terminal sizes arrive as `ResizeEvents`; `ResizeCheck`
tells the WebSocket session when a client's resize stream stops decoding.
"""

from __future__ import annotations

import logging
from collections import deque
from collections.abc import AsyncIterator

from vkpy.api.streaming.shared import ByteQueue
from vkpy.api.streaming.spdy_session import SpdyStream
from vkpy.api.streaming.ws_channels import ChannelSession
from vkpy.providers.base import TerminalSize
from vkpy.streams import channels
from vkpy.streams.channels import ResizeDecoder

log = logging.getLogger(__name__)


class QueueSource:
    """A `ByteSource` over a client's input queue."""

    def __init__(self, queue: ByteQueue) -> None:
        self._queue = queue

    async def read(self) -> bytes:
        return await self._queue.read()


class SpdySink:
    """A `ByteSink` writing DATA frames on a SPDY stream; silent once the client is gone."""

    def __init__(self, stream: SpdyStream) -> None:
        self._stream = stream

    async def write(self, data: bytes) -> None:
        if data:
            await self._stream.write(data)

    async def close(self) -> None:
        await self._stream.close()


class ChannelSink:
    """A `ByteSink` writing messages on one WebSocket channel (v5: closed with the close signal)."""

    def __init__(self, session: ChannelSession, channel: int) -> None:
        self._session = session
        self._channel = channel
        self._closed = False

    async def write(self, data: bytes) -> None:
        if data and not self._closed:
            await self._session.send(self._channel, data)

    async def close(self) -> None:
        if not self._closed:
            self._closed = True
            await self._session.send_close(self._channel)


class ResizeEvents:
    """The terminal sizes a client sends, as an async iterator (ends with the stream).

    A malformed resize stream ends the iteration (as the kubelet stops reading it);
    the command itself goes on."""

    def __init__(self, queue: ByteQueue, what: str) -> None:
        self._queue = queue
        self._decoder = ResizeDecoder()
        self._pending: deque[TerminalSize] = deque()
        self._what = what

    def __aiter__(self) -> AsyncIterator[TerminalSize]:
        return self

    async def __anext__(self) -> TerminalSize:
        while not self._pending:
            data = await self._queue.read()
            if not data:
                raise StopAsyncIteration
            try:
                sizes = self._decoder.feed(data)
            except channels.ProtocolError as error:
                log.warning("bad resize stream", extra={"session": self._what, "error": str(error)})
                self._queue.discard()
                raise StopAsyncIteration from None
            self._pending.extend(TerminalSize(s.width, s.height) for s in sizes)
        return self._pending.popleft()


class ResizeCheck:
    """Does a client's resize stream decode? Said once in the log when it does not
    (its later messages are then ignored, as the kubelet stops reading it)."""

    def __init__(self, what: str) -> None:
        self._decoder = ResizeDecoder()
        self._what = what

    def __call__(self, data: bytes) -> bool:
        try:
            self._decoder.feed(data)
        except channels.ProtocolError as error:
            log.warning(
                "bad resize stream: the terminal size is no longer followed",
                extra={"session": self._what, "error": str(error)},
            )
            return False
        return True
