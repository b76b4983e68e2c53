"""Raw streaming clients for tests: a SPDY/3.1 client built on vkpy.streams, over asyncio.

kubectl is the real client in integration tests; these let unit tests see every frame
(what the server sends, in which order, and when) and misbehave on purpose.
"""

from __future__ import annotations

import asyncio
import contextlib
import ssl
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from vkpy.streams.spdy import (
    DataReceived,
    Event,
    GoAwayReceived,
    PingAcknowledged,
    SpdyConnection,
    StreamReplied,
    StreamReset,
)


@dataclass
class HttpAnswer:
    status: int
    headers: list[tuple[str, str]]
    body: bytes = b""

    def header(self, name: str) -> str | None:
        return next((v for k, v in self.headers if k.lower() == name.lower()), None)

    def header_values(self, name: str) -> list[str]:
        return [v for k, v in self.headers if k.lower() == name.lower()]


@dataclass
class _StreamState:
    data: bytearray = field(default_factory=bytearray)
    fin: bool = False
    replied: bool = False
    reset: int | None = None
    changed: asyncio.Event = field(default_factory=asyncio.Event)


async def _read_head(reader: asyncio.StreamReader) -> HttpAnswer:
    head = await reader.readuntil(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    status = int(lines[0].split(" ")[1])
    headers = [
        (name.strip(), value.strip())
        for name, _, value in (line.partition(":") for line in lines[1:] if line)
    ]
    return HttpAnswer(status, headers)


class SpdyClient:
    """The client side of a kubelet SPDY connection, frame by frame."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader = reader
        self.writer = writer
        self.conn = SpdyConnection(client_side=True)
        self.streams: dict[int, _StreamState] = {}
        self.events: list[Event] = []
        self.goaway: GoAwayReceived | None = None
        self.pongs: list[int] = []
        self.closed = asyncio.Event()
        self.bytes_received = 0
        self._pump = asyncio.create_task(self._read(), name="spdy-test-client")

    @classmethod
    async def connect(
        cls,
        host: str,
        port: int,
        path: str,
        *,
        protocols: Sequence[str] = ("v4.channel.k8s.io",),
        method: str = "POST",
        upgrade: str | None = "SPDY/3.1",
        ssl_context: ssl.SSLContext | None = None,
        headers: Mapping[str, str] | None = None,
    ) -> tuple[SpdyClient | None, HttpAnswer]:
        """Send the upgrade request; the client if the server answered 101."""
        reader, writer = await asyncio.open_connection(host, port, ssl=ssl_context)
        lines = [f"{method} {path} HTTP/1.1", f"Host: {host}:{port}", "Content-Length: 0"]
        if upgrade is not None:
            lines += ["Connection: Upgrade", f"Upgrade: {upgrade}"]
        lines += [f"X-Stream-Protocol-Version: {p}" for p in protocols]
        lines += [f"{k}: {v}" for k, v in (headers or {}).items()]
        writer.write(("\r\n".join(lines) + "\r\n\r\n").encode())
        answer = await _read_head(reader)
        if answer.status != 101:
            length = int(answer.header("Content-Length") or 0)
            answer.body = await reader.readexactly(length) if length else b""
            writer.close()
            with contextlib.suppress(ConnectionError, ssl.SSLError):
                await writer.wait_closed()
            return None, answer
        return cls(reader, writer), answer

    async def _read(self) -> None:
        try:
            while data := await self.reader.read(65536):
                self.bytes_received += len(data)
                for event in self.conn.receive_data(data):
                    self._on_event(event)
                self._flush()
        except (ConnectionError, ssl.SSLError):
            pass
        finally:
            self.closed.set()
            for state in self.streams.values():
                state.changed.set()

    def _on_event(self, event: Event) -> None:
        self.events.append(event)
        if isinstance(event, StreamReplied):
            state = self.streams[event.stream_id]
            state.replied = True
            state.changed.set()
        elif isinstance(event, DataReceived):
            state = self.streams[event.stream_id]
            state.data += event.data
            state.fin = state.fin or event.fin
            state.changed.set()
        elif isinstance(event, StreamReset):
            state = self.streams[event.stream_id]
            state.reset = event.status
            state.changed.set()
        elif isinstance(event, GoAwayReceived):
            self.goaway = event
        elif isinstance(event, PingAcknowledged):
            self.pongs.append(event.ping_id)

    def _flush(self) -> None:
        out = self.conn.data_to_send()
        if out and not self.writer.is_closing():
            self.writer.write(out)

    def open(self, headers: Mapping[str, str], *, fin: bool = False) -> int:
        stream_id = self.conn.open_stream(headers, fin=fin)
        self.streams[stream_id] = _StreamState()
        self._flush()
        return stream_id

    async def send(self, stream_id: int, data: bytes, *, fin: bool = False) -> None:
        self.conn.send_data(stream_id, data, fin=fin)
        self._flush()
        await self.writer.drain()

    def ping(self) -> int:
        ping_id = self.conn.ping()
        self._flush()
        return ping_id

    async def wait_stream(self, stream_id: int, timeout: float = 10.0) -> bytes:
        """Everything the server sends on a stream, once it FINs (or resets) it."""
        state = self.streams[stream_id]

        async def finished() -> None:
            while not (state.fin or state.reset is not None or self.closed.is_set()):
                state.changed.clear()
                await state.changed.wait()

        try:
            await asyncio.wait_for(finished(), timeout)
        except TimeoutError:
            raise AssertionError(f"stream not finished; got {bytes(state.data)!r}") from None
        return bytes(state.data)

    async def wait_data(self, stream_id: int, size: int, timeout: float = 10.0) -> bytes:
        state = self.streams[stream_id]

        async def enough() -> None:
            while len(state.data) < size and not (state.fin or self.closed.is_set()):
                state.changed.clear()
                await state.changed.wait()

        try:
            await asyncio.wait_for(enough(), timeout)
        except TimeoutError:
            raise AssertionError(f"wanted {size} bytes, got {bytes(state.data)!r}") from None
        return bytes(state.data)

    async def wait_goaway(self, timeout: float = 10.0) -> None:
        async def goaway() -> None:
            while self.goaway is None and not self.closed.is_set():
                await asyncio.sleep(0.01)

        await asyncio.wait_for(goaway(), timeout)
        assert self.goaway is not None, "closed without GOAWAY"

    async def wait_closed(self, timeout: float = 10.0) -> None:
        await asyncio.wait_for(self.closed.wait(), timeout)

    async def close(self) -> None:
        """Hang up (as a client that goes away does)."""
        self.writer.close()
        with contextlib.suppress(ConnectionError, ssl.SSLError):
            await self.writer.wait_closed()
        await asyncio.wait({self._pump})

    def abort(self) -> None:
        transport = self.writer.transport
        transport.abort()
