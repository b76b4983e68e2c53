"""A sans-IO SPDY/3.1 connection codec, because kubectl exec/attach/port-forward reach the kubelet
over SPDY.

The API server speaks SPDY/3.1 (as moby/spdystream implements it) to the kubelet for
remote commands and port forwarding, and no maintained Python SPDY library exists.  This
module turns bytes from the socket into events (``receive_data``) and method calls into
bytes for the socket (``data_to_send``), doing no I/O itself, in the style of h11/h2, so
the asyncio side stays thin and the codec can be tested and fuzzed byte by byte.  It
keeps one zlib context per direction for header blocks (primed with the SPDY/3
dictionary), answers PINGs by itself, never enforces or sends flow control (spdystream
ignores it), and bounds what it buffers: data frame payloads are streamed out as they
arrive, only control frames are buffered, and their size, the decompressed header block
and the header count are all limited.  Any malformed input ends in ``ProtocolError``.
"""

from __future__ import annotations

from dataclasses import dataclass

from vkpy.streams.spdy_wire import (
    FLAG_FIN,
    FLAG_UNIDIRECTIONAL,
    FRAME_HEADER,
    MAX_SEND_DATA_FRAME,
    MAX_STREAM_ID,
    SPDY_VERSION,
    U32,
    ConnectionClosedError,
    DataReceived,
    Event,
    FrameType,
    GoAwayReceived,
    GoAwayStatus,
    HeaderCompressor,
    HeaderDecompressor,
    HeadersIn,
    HeadersReceived,
    PingAcknowledged,
    PingReceived,
    ProtocolError,
    RstStatus,
    SettingsReceived,
    SpdyError,
    SpdyLimits,
    StreamClosedError,
    StreamOpened,
    StreamReplied,
    StreamReset,
    StreamStateError,
    Violation,
    WindowUpdateReceived,
    control_frame,
    data_frame,
    decode_header_block,
    encode_header_block,
    header_values,
)

__all__ = [
    "FLAG_FIN",
    "FLAG_UNIDIRECTIONAL",
    "MAX_SEND_DATA_FRAME",
    "SPDY_VERSION",
    "ConnectionClosedError",
    "DataReceived",
    "Event",
    "FrameType",
    "GoAwayReceived",
    "GoAwayStatus",
    "HeaderCompressor",
    "HeaderDecompressor",
    "HeadersIn",
    "HeadersReceived",
    "PingAcknowledged",
    "PingReceived",
    "ProtocolError",
    "RstStatus",
    "SettingsReceived",
    "SpdyError",
    "SpdyLimits",
    "StreamClosedError",
    "StreamOpened",
    "StreamReplied",
    "StreamReset",
    "StreamStateError",
    "Violation",
    "WindowUpdateReceived",
    "control_frame",
    "data_frame",
    "decode_header_block",
    "encode_header_block",
    "header_values",
]


@dataclass(slots=True)
class _Stream:
    local: bool
    """Opened by us (we sent SYN_STREAM)."""
    replied: bool = False
    local_closed: bool = False
    remote_closed: bool = False


@dataclass(slots=True)
class _Payload:
    """The DATA (or ignored control frame) payload being streamed through."""

    stream_id: int | None
    """None: discard the bytes."""
    remaining: int
    fin: bool


class SpdyConnection:
    """One SPDY/3.1 session, either side; feed it bytes, collect events and bytes to send.

    Policy, so the asyncio side need not guess:

    * DATA or HEADERS for a stream that is unknown, forgotten, or already half-closed by
      the peer (after its FIN or a RST) are discarded silently, as spdystream does;
      frames racing with a local ``reset()`` are thus harmless.
    * SYN_STREAM with a wrong-parity or non-increasing id gets RST_STREAM(PROTOCOL_ERROR);
      beyond ``max_open_streams`` RST_STREAM(REFUSED_STREAM); after our GOAWAY it is
      ignored. The header block is decompressed anyway to keep the zlib context in step.
    * Unknown control frame types are skipped. SETTINGS and WINDOW_UPDATE are reported
      and otherwise ignored: no window is enforced and none is ever sent.
    * A stream is forgotten once both sides have closed it or either side reset it.
    * After a ``ProtocolError`` the connection is dead: GOAWAY(PROTOCOL_ERROR) is queued
      and every later ``receive_data`` raises the same error.
    """

    def __init__(self, *, client_side: bool = False, limits: SpdyLimits | None = None) -> None:
        self._client_side = client_side
        self._limits = limits or SpdyLimits()
        self._compressor = HeaderCompressor()
        self._decompressor = HeaderDecompressor(self._limits)
        self._inbound = bytearray()
        self._outbound = bytearray()
        self._payload: _Payload | None = None
        self._streams: dict[int, _Stream] = {}
        self._next_stream_id = 1 if client_side else 2
        self._next_ping_id = 1 if client_side else 2
        self._last_peer_stream_id = 0
        self._goaway_sent = False
        self._goaway_received = False
        self._error: ProtocolError | None = None

    # -- state ------------------------------------------------------------------------

    @property
    def last_peer_stream_id(self) -> int:
        """Highest stream id the peer opened and we accepted (GOAWAY's last-good id)."""
        return self._last_peer_stream_id

    @property
    def goaway_sent(self) -> bool:
        return self._goaway_sent

    @property
    def goaway_received(self) -> bool:
        return self._goaway_received

    @property
    def open_stream_ids(self) -> frozenset[int]:
        return frozenset(self._streams)

    @property
    def buffered_bytes(self) -> int:
        """Inbound bytes held for an incomplete frame header or control frame."""
        return len(self._inbound)

    def can_send(self, stream_id: int) -> bool:
        """True while we may still send DATA/HEADERS (or FIN) on the stream."""
        stream = self._streams.get(stream_id)
        return stream is not None and not stream.local_closed

    def can_receive(self, stream_id: int) -> bool:
        """True while the peer has not closed its side of the stream."""
        stream = self._streams.get(stream_id)
        return stream is not None and not stream.remote_closed

    # -- outbound ---------------------------------------------------------------------

    def data_to_send(self) -> bytes:
        """Take every byte queued for the peer so far."""
        out = bytes(self._outbound)
        self._outbound.clear()
        return out

    def open_stream(
        self, headers: HeadersIn, *, fin: bool = False, unidirectional: bool = False
    ) -> int:
        """Send SYN_STREAM with the next id of our parity and return that id."""
        if self._goaway_received:
            raise ConnectionClosedError("peer sent GOAWAY")
        stream_id = self._next_stream_id
        if stream_id > MAX_STREAM_ID:
            raise ConnectionClosedError("stream ids exhausted")
        self._next_stream_id += 2
        flags = (FLAG_FIN if fin else 0) | (FLAG_UNIDIRECTIONAL if unidirectional else 0)
        block = self._compressor.compress(headers)
        body = U32.pack(stream_id) + U32.pack(0) + b"\x00\x00" + block
        self._outbound += control_frame(FrameType.SYN_STREAM, flags, body)
        self._streams[stream_id] = _Stream(
            local=True, local_closed=fin, remote_closed=unidirectional
        )
        self._forget_if_done(stream_id)
        return stream_id

    def reply(self, stream_id: int, headers: HeadersIn | None = None, *, fin: bool = False) -> None:
        """Answer a peer's stream with SYN_REPLY (empty headers by default)."""
        stream = self._writable(stream_id)
        if stream.local or stream.replied:
            raise StreamStateError(stream_id, "SYN_REPLY not allowed here")
        block = self._compressor.compress(headers or {})
        stream.replied = True
        self._outbound += control_frame(
            FrameType.SYN_REPLY, FLAG_FIN if fin else 0, U32.pack(stream_id) + block
        )
        self._close_local(stream_id, fin)

    def send_headers(self, stream_id: int, headers: HeadersIn, *, fin: bool = False) -> None:
        self._replied(stream_id)
        block = self._compressor.compress(headers)
        self._outbound += control_frame(
            FrameType.HEADERS, FLAG_FIN if fin else 0, U32.pack(stream_id) + block
        )
        self._close_local(stream_id, fin)

    def send_data(self, stream_id: int, data: bytes, *, fin: bool = False) -> None:
        """Queue DATA frames of at most 32 KiB; empty data with ``fin`` sends an empty FIN.

        On a stream the peer opened, ``reply()`` must come first: spdystream silently
        drops DATA that arrives before the SYN_REPLY.
        """
        self._replied(stream_id)
        view = memoryview(data)
        for start in range(0, len(view), MAX_SEND_DATA_FRAME):
            chunk = bytes(view[start : start + MAX_SEND_DATA_FRAME])
            last = start + MAX_SEND_DATA_FRAME >= len(view)
            self._outbound += data_frame(stream_id, chunk, fin and last)
        if fin and not view:
            self._outbound += data_frame(stream_id, b"", True)
        self._close_local(stream_id, fin)

    def reset(self, stream_id: int, status: int = RstStatus.CANCEL) -> None:
        """Send RST_STREAM and forget the stream (allowed for unknown streams too)."""
        if not 0 < stream_id <= MAX_STREAM_ID or not 0 < status <= 0xFFFF_FFFF:
            raise ValueError("RST_STREAM needs a stream id and a non-zero status")
        self._outbound += control_frame(
            FrameType.RST_STREAM, 0, FRAME_HEADER.pack(stream_id, status)
        )
        self._streams.pop(stream_id, None)

    def goaway(self, status: int = GoAwayStatus.OK) -> None:
        """Send GOAWAY once; later SYN_STREAMs from the peer are ignored."""
        if self._goaway_sent:
            return
        self._goaway_sent = True
        body = FRAME_HEADER.pack(self._last_peer_stream_id, status)
        self._outbound += control_frame(FrameType.GOAWAY, 0, body)

    def ping(self, ping_id: int | None = None) -> int:
        """Send PING (by default with the next id of our parity) and return its id."""
        if ping_id is None:
            ping_id = self._next_ping_id
            step = self._next_ping_id + 2
            self._next_ping_id = step if step <= MAX_STREAM_ID else step - (MAX_STREAM_ID - 1)
        elif not 0 <= ping_id <= 0xFFFF_FFFF:
            raise ValueError("PING id must fit in 32 bits")
        self._outbound += control_frame(FrameType.PING, 0, U32.pack(ping_id))
        return ping_id

    def _writable(self, stream_id: int) -> _Stream:
        stream = self._streams.get(stream_id)
        if stream is None or stream.local_closed:
            raise StreamClosedError(stream_id, "not open for sending")
        return stream

    def _replied(self, stream_id: int) -> _Stream:
        stream = self._writable(stream_id)
        if not stream.local and not stream.replied:
            raise StreamStateError(stream_id, "reply() before sending on a peer's stream")
        return stream

    def _close_local(self, stream_id: int, fin: bool) -> None:
        if fin:
            self._streams[stream_id].local_closed = True
            self._forget_if_done(stream_id)

    def _close_remote(self, stream_id: int) -> None:
        self._streams[stream_id].remote_closed = True
        self._forget_if_done(stream_id)

    def _forget_if_done(self, stream_id: int) -> None:
        stream = self._streams[stream_id]
        if stream.local_closed and stream.remote_closed:
            del self._streams[stream_id]

    # -- inbound ----------------------------------------------------------------------

    def receive_data(self, data: bytes) -> list[Event]:
        """Feed bytes from the peer (any fragmentation); return the events they complete.

        Raises ``ProtocolError`` (and queues GOAWAY) on malformed input.
        """
        if self._error is not None:
            raise self._error
        events: list[Event] = []
        self._inbound += data
        try:
            consumed = self._parse(events)
        except ProtocolError as exc:
            self._fail(exc)
            raise
        del self._inbound[:consumed]
        return events

    def _fail(self, exc: ProtocolError) -> None:
        self._error = exc
        self._inbound.clear()
        self._payload = None
        self.goaway(GoAwayStatus.PROTOCOL_ERROR)

    def _parse(self, events: list[Event]) -> int:
        buf = self._inbound
        pos = 0
        while True:
            if self._payload is not None:
                pos = self._stream_payload(pos, events)
                if self._payload is not None:
                    return pos
            if len(buf) - pos < 8:
                return pos
            first, second = FRAME_HEADER.unpack_from(buf, pos)
            flags, length = second >> 24, second & 0xFF_FFFF
            if not first & 0x8000_0000:
                pos += 8
                self._begin_data(first, flags, length, events)
                continue
            frame_type = self._check_control_header(first, length)
            if frame_type is None:
                pos += 8
                self._payload = _Payload(None, length, False) if length else None
                continue
            if len(buf) - pos < 8 + length:
                return pos
            body = bytes(buf[pos + 8 : pos + 8 + length])
            pos += 8 + length
            self._on_control(frame_type, flags, body, events)

    def _check_control_header(self, first: int, length: int) -> FrameType | None:
        version = first >> 16 & 0x7FFF
        if version != SPDY_VERSION:
            raise ProtocolError(Violation.UNSUPPORTED_VERSION, str(version))
        try:
            frame_type = FrameType(first & 0xFFFF)
        except ValueError:
            return None
        if length > self._limits.max_control_frame:
            raise ProtocolError(Violation.FRAME_TOO_LARGE, f"{length} bytes")
        return frame_type

    def _begin_data(self, stream_id: int, flags: int, length: int, events: list[Event]) -> None:
        if stream_id == 0:
            raise ProtocolError(Violation.ZERO_STREAM_ID, "DATA")
        self._payload = _Payload(stream_id, length, bool(flags & FLAG_FIN))
        if length == 0:
            self._finish_payload(b"", events)

    def _stream_payload(self, pos: int, events: list[Event]) -> int:
        payload = self._payload
        assert payload is not None
        take = min(payload.remaining, len(self._inbound) - pos)
        if take == 0:
            return pos
        chunk = bytes(self._inbound[pos : pos + take])
        payload.remaining -= take
        if payload.remaining:
            self._deliver(payload.stream_id, chunk, False, events)
        else:
            self._finish_payload(chunk, events)
        return pos + take

    def _finish_payload(self, chunk: bytes, events: list[Event]) -> None:
        payload = self._payload
        assert payload is not None
        self._payload = None
        self._deliver(payload.stream_id, chunk, payload.fin, events)

    def _deliver(self, stream_id: int | None, chunk: bytes, fin: bool, events: list[Event]) -> None:
        if stream_id is None or not self.can_receive(stream_id):
            return
        if chunk or fin:
            events.append(DataReceived(stream_id, chunk, fin))
        if fin:
            self._close_remote(stream_id)

    # -- control frames ---------------------------------------------------------------

    def _on_control(
        self, frame_type: FrameType, flags: int, body: bytes, events: list[Event]
    ) -> None:
        handler = _HANDLERS[frame_type]
        handler(self, flags, body, events)

    def _on_syn_stream(self, flags: int, body: bytes, events: list[Event]) -> None:
        if len(body) < 10:
            raise ProtocolError(Violation.BAD_FRAME, "short SYN_STREAM")
        stream_id, associated = FRAME_HEADER.unpack_from(body, 0)
        stream_id &= MAX_STREAM_ID
        headers = self._decompressor.decompress(body[10:])
        if stream_id == 0:
            raise ProtocolError(Violation.ZERO_STREAM_ID, "SYN_STREAM")
        if self._goaway_sent:
            return
        if not self._acceptable_new_id(stream_id):
            self._refuse(stream_id, RstStatus.PROTOCOL_ERROR, events)
            return
        self._last_peer_stream_id = stream_id
        if len(self._streams) >= self._limits.max_open_streams:
            self._refuse(stream_id, RstStatus.REFUSED_STREAM, events)
            return
        fin, one_way = bool(flags & FLAG_FIN), bool(flags & FLAG_UNIDIRECTIONAL)
        self._streams[stream_id] = _Stream(local=False, local_closed=one_way, remote_closed=fin)
        events.append(
            StreamOpened(stream_id, headers, fin, one_way, associated & MAX_STREAM_ID, body[8] >> 5)
        )
        self._forget_if_done(stream_id)

    def _refuse(self, stream_id: int, status: RstStatus, events: list[Event]) -> None:
        """RST a SYN_STREAM we will not take; a live stream reusing the id dies with it."""
        if stream_id in self._streams:
            events.append(StreamReset(stream_id, status))
        self.reset(stream_id, status)

    def _acceptable_new_id(self, stream_id: int) -> bool:
        peer_parity = 0 if self._client_side else 1
        return stream_id % 2 == peer_parity and stream_id > self._last_peer_stream_id

    def _on_syn_reply(self, flags: int, body: bytes, events: list[Event]) -> None:
        stream_id, headers = self._stream_headers(body, "SYN_REPLY")
        stream = self._streams.get(stream_id)
        if stream is None or not stream.local or stream.replied or stream.remote_closed:
            return
        stream.replied = True
        fin = bool(flags & FLAG_FIN)
        events.append(StreamReplied(stream_id, headers, fin))
        if fin:
            self._close_remote(stream_id)

    def _on_headers(self, flags: int, body: bytes, events: list[Event]) -> None:
        stream_id, headers = self._stream_headers(body, "HEADERS")
        if not self.can_receive(stream_id):
            return
        fin = bool(flags & FLAG_FIN)
        events.append(HeadersReceived(stream_id, headers, fin))
        if fin:
            self._close_remote(stream_id)

    def _stream_headers(self, body: bytes, name: str) -> tuple[int, dict[str, str]]:
        if len(body) < 4:
            raise ProtocolError(Violation.BAD_FRAME, f"short {name}")
        stream_id = U32.unpack_from(body, 0)[0] & MAX_STREAM_ID
        headers = self._decompressor.decompress(body[4:])
        if stream_id == 0:
            raise ProtocolError(Violation.ZERO_STREAM_ID, name)
        return stream_id, headers

    def _on_rst_stream(self, flags: int, body: bytes, events: list[Event]) -> None:
        stream_id, status = _fixed_pair(body, "RST_STREAM")
        stream_id &= MAX_STREAM_ID
        if stream_id == 0:
            raise ProtocolError(Violation.ZERO_STREAM_ID, "RST_STREAM")
        if status == 0:
            raise ProtocolError(Violation.BAD_FRAME, "RST_STREAM status 0")
        if self._streams.pop(stream_id, None) is not None:
            events.append(StreamReset(stream_id, status))

    def _on_settings(self, flags: int, body: bytes, events: list[Event]) -> None:
        if len(body) < 4 or len(body) != 4 + 8 * U32.unpack_from(body, 0)[0]:
            raise ProtocolError(Violation.BAD_FRAME, "SETTINGS length")
        settings = {key & 0xFF_FFFF: value for key, value in FRAME_HEADER.iter_unpack(body[4:])}
        events.append(SettingsReceived(settings, bool(flags & 0x01)))

    def _on_ping(self, flags: int, body: bytes, events: list[Event]) -> None:
        if len(body) != 4:
            raise ProtocolError(Violation.BAD_FRAME, "PING length")
        (ping_id,) = U32.unpack(body)
        if ping_id % 2 == self._next_ping_id % 2:
            events.append(PingAcknowledged(ping_id))
            return
        self._outbound += control_frame(FrameType.PING, 0, body)
        events.append(PingReceived(ping_id))

    def _on_goaway(self, flags: int, body: bytes, events: list[Event]) -> None:
        last_good, status = _fixed_pair(body, "GOAWAY")
        self._goaway_received = True
        events.append(GoAwayReceived(last_good & MAX_STREAM_ID, status))

    def _on_window_update(self, flags: int, body: bytes, events: list[Event]) -> None:
        stream_id, delta = _fixed_pair(body, "WINDOW_UPDATE")
        events.append(WindowUpdateReceived(stream_id & MAX_STREAM_ID, delta & MAX_STREAM_ID))


def _fixed_pair(body: bytes, name: str) -> tuple[int, int]:
    if len(body) != 8:
        raise ProtocolError(Violation.BAD_FRAME, f"{name} length {len(body)}")
    first, second = FRAME_HEADER.unpack(body)
    return first, second


_HANDLERS = {
    FrameType.SYN_STREAM: SpdyConnection._on_syn_stream,
    FrameType.SYN_REPLY: SpdyConnection._on_syn_reply,
    FrameType.RST_STREAM: SpdyConnection._on_rst_stream,
    FrameType.SETTINGS: SpdyConnection._on_settings,
    FrameType.PING: SpdyConnection._on_ping,
    FrameType.GOAWAY: SpdyConnection._on_goaway,
    FrameType.HEADERS: SpdyConnection._on_headers,
    FrameType.WINDOW_UPDATE: SpdyConnection._on_window_update,
}
