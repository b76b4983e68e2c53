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

import enum
import struct
import zlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from vkpy.streams.spdy_dictionary import SPDY3_DICTIONARY

SPDY_VERSION = 3
MAX_SEND_DATA_FRAME = 32 * 1024
"""Outgoing DATA payloads are split into frames of at most this many bytes."""
FLAG_FIN = 0x01
FLAG_UNIDIRECTIONAL = 0x02
_MAX_STREAM_ID = 0x7FFF_FFFF
_HEADER = struct.Struct(">II")
_U32 = struct.Struct(">I")
_COMPRESS_WINDOW_BITS = 11
_COMPRESS_MEM_LEVEL = 5


class FrameType(enum.IntEnum):
    SYN_STREAM = 1
    SYN_REPLY = 2
    RST_STREAM = 3
    SETTINGS = 4
    PING = 6
    GOAWAY = 7
    HEADERS = 8
    WINDOW_UPDATE = 9


class RstStatus(enum.IntEnum):
    """RST_STREAM status codes of SPDY/3."""

    PROTOCOL_ERROR = 1
    INVALID_STREAM = 2
    REFUSED_STREAM = 3
    UNSUPPORTED_VERSION = 4
    CANCEL = 5
    INTERNAL_ERROR = 6
    FLOW_CONTROL_ERROR = 7
    STREAM_IN_USE = 8
    STREAM_ALREADY_CLOSED = 9
    INVALID_CREDENTIALS = 10
    FRAME_TOO_LARGE = 11


class GoAwayStatus(enum.IntEnum):
    """GOAWAY status codes as spdystream numbers them (the draft uses 11 for INTERNAL_ERROR)."""

    OK = 0
    PROTOCOL_ERROR = 1
    INTERNAL_ERROR = 2


class Violation(enum.Enum):
    """What the peer did wrong; carried by ``ProtocolError.violation``."""

    UNSUPPORTED_VERSION = "unsupported version"
    FRAME_TOO_LARGE = "control frame too large"
    BAD_FRAME = "malformed frame"
    ZERO_STREAM_ID = "stream id zero"
    BAD_COMPRESSION = "header block does not decompress"
    BAD_HEADER_BLOCK = "malformed header block"
    HEADER_BLOCK_TOO_LARGE = "header block too large"


class SpdyError(Exception):
    """Base of the errors raised by this module."""


class ProtocolError(SpdyError):
    """The peer broke SPDY/3.1; the connection is unusable (a GOAWAY is already queued)."""

    def __init__(self, violation: Violation, detail: str = "") -> None:
        super().__init__(f"{violation.value}: {detail}" if detail else violation.value)
        self.violation = violation


class StreamStateError(SpdyError):
    """A local call that the stream's state does not allow (e.g. a second SYN_REPLY)."""

    def __init__(self, stream_id: int, detail: str) -> None:
        super().__init__(f"stream {stream_id}: {detail}")
        self.stream_id = stream_id


class StreamClosedError(StreamStateError):
    """Sending on a stream that is unknown, already FIN'd by us, or reset by either side."""


class ConnectionClosedError(SpdyError):
    """Opening a stream after the peer sent GOAWAY, or after the stream ids ran out."""


@dataclass(frozen=True, slots=True)
class SpdyLimits:
    """Bounds on what one connection buffers for a peer.

    DATA payloads are never buffered (they are streamed out), so these bound memory.
    """

    max_control_frame: int = 256 * 1024
    """Largest control frame body accepted, in bytes (the wire allows 16 MiB)."""
    max_header_block: int = 256 * 1024
    """Largest decompressed header block, in bytes."""
    max_header_count: int = 1024
    """Most name/value pairs in one header block."""
    max_open_streams: int = 1024
    """Most streams tracked at once; further SYN_STREAMs are refused with RST_STREAM."""


# --- events --------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class StreamOpened:
    """The peer sent SYN_STREAM. Multiple values of one header are joined by NUL."""

    stream_id: int
    headers: Mapping[str, str] = field(hash=False)
    fin: bool = False
    unidirectional: bool = False
    associated_stream_id: int = 0
    priority: int = 0


@dataclass(frozen=True, slots=True)
class StreamReplied:
    """The peer answered a stream we opened with SYN_REPLY."""

    stream_id: int
    headers: Mapping[str, str] = field(hash=False)
    fin: bool = False


@dataclass(frozen=True, slots=True)
class HeadersReceived:
    stream_id: int
    headers: Mapping[str, str] = field(hash=False)
    fin: bool = False


@dataclass(frozen=True, slots=True)
class DataReceived:
    """Payload bytes for a stream; one DATA frame may arrive as several of these.

    ``fin`` is set on the last piece of a frame carrying FIN (possibly with empty data).
    """

    stream_id: int
    data: bytes
    fin: bool = False


@dataclass(frozen=True, slots=True)
class StreamReset:
    stream_id: int
    status: int


@dataclass(frozen=True, slots=True)
class SettingsReceived:
    settings: Mapping[int, int] = field(hash=False)
    clear_persisted: bool = False


@dataclass(frozen=True, slots=True)
class PingReceived:
    """The peer pinged us; the echo is already queued in ``data_to_send()``."""

    ping_id: int


@dataclass(frozen=True, slots=True)
class PingAcknowledged:
    """A PING with our own parity came back: the answer to one of ours."""

    ping_id: int


@dataclass(frozen=True, slots=True)
class GoAwayReceived:
    last_good_stream_id: int
    status: int


@dataclass(frozen=True, slots=True)
class WindowUpdateReceived:
    """Reported for completeness; flow control is never enforced."""

    stream_id: int
    delta: int


Event = (
    StreamOpened
    | StreamReplied
    | HeadersReceived
    | DataReceived
    | StreamReset
    | SettingsReceived
    | PingReceived
    | PingAcknowledged
    | GoAwayReceived
    | WindowUpdateReceived
)

HeadersIn = Mapping[str, str | Sequence[str]]
"""Outgoing headers: a value may be a list, sent NUL-joined. Names are lowercased."""


def header_values(value: str) -> list[str]:
    """Split a received header value into its NUL-separated entries."""
    return value.split("\x00")


# --- header blocks -----------------------------------------------------------------------


def encode_header_block(headers: HeadersIn) -> bytes:
    """Serialize headers as an uncompressed SPDY/3 block; names are lowercased."""
    merged: dict[str, str] = {}
    for name, value in headers.items():
        key = name.lower()
        if not key:
            raise ValueError("empty header name")
        text = value if isinstance(value, str) else "\x00".join(value)
        merged[key] = f"{merged[key]}\x00{text}" if key in merged else text
    parts = [_U32.pack(len(merged))]
    for key, text in merged.items():
        for item in (key, text):
            raw = item.encode("utf-8", "surrogateescape")
            parts.append(_U32.pack(len(raw)))
            parts.append(raw)
    return b"".join(parts)


def decode_header_block(block: bytes, max_count: int = 1024) -> dict[str, str]:
    """Parse an uncompressed SPDY/3 block; uppercase names are lowercased and repeats merged."""
    if len(block) < 4:
        raise ProtocolError(Violation.BAD_HEADER_BLOCK, "no pair count")
    (count,) = _U32.unpack_from(block, 0)
    if count > max_count:
        raise ProtocolError(Violation.BAD_HEADER_BLOCK, f"{count} pairs")
    if count * 8 > len(block) - 4:
        raise ProtocolError(Violation.BAD_HEADER_BLOCK, "truncated")
    headers: dict[str, str] = {}
    pos = 4
    for _ in range(count):
        name, pos = _read_string(block, pos)
        value, pos = _read_string(block, pos)
        key = name.lower()
        if not key:
            raise ProtocolError(Violation.BAD_HEADER_BLOCK, "empty header name")
        headers[key] = f"{headers[key]}\x00{value}" if key in headers else value
    if pos != len(block):
        raise ProtocolError(Violation.BAD_HEADER_BLOCK, "trailing bytes")
    return headers


def _read_string(block: bytes, pos: int) -> tuple[str, int]:
    if pos + 4 > len(block):
        raise ProtocolError(Violation.BAD_HEADER_BLOCK, "truncated")
    (size,) = _U32.unpack_from(block, pos)
    end = pos + 4 + size
    if end > len(block):
        raise ProtocolError(Violation.BAD_HEADER_BLOCK, "truncated")
    return block[pos + 4 : end].decode("utf-8", "surrogateescape"), end


class HeaderCompressor:
    """The outbound zlib context: one per connection, sync-flushed after every block.

    A 2 KiB window (still larger than the dictionary) and a small hash table keep it near
    30 KiB instead of zlib's default 260 KiB; header blocks are few and tiny, so the
    compression ratio does not suffer, and any zlib reader accepts the smaller window.
    """

    def __init__(self) -> None:
        self._zlib = zlib.compressobj(
            zlib.Z_DEFAULT_COMPRESSION,
            zlib.DEFLATED,
            _COMPRESS_WINDOW_BITS,
            _COMPRESS_MEM_LEVEL,
            zdict=SPDY3_DICTIONARY,
        )

    def compress(self, headers: HeadersIn) -> bytes:
        block = encode_header_block(headers)
        return self._zlib.compress(block) + self._zlib.flush(zlib.Z_SYNC_FLUSH)


class HeaderDecompressor:
    """The inbound zlib context: one per connection, output bounded per block."""

    def __init__(self, limits: SpdyLimits | None = None) -> None:
        self._limits = limits or SpdyLimits()
        self._zlib = zlib.decompressobj(zdict=SPDY3_DICTIONARY)

    def decompress(self, payload: bytes) -> dict[str, str]:
        limit = self._limits.max_header_block
        try:
            raw = self._zlib.decompress(payload, limit + 1)
        except zlib.error as exc:
            raise ProtocolError(Violation.BAD_COMPRESSION, str(exc)) from None
        if len(raw) > limit or self._zlib.unconsumed_tail:
            raise ProtocolError(Violation.HEADER_BLOCK_TOO_LARGE, f"over {limit} bytes")
        if self._zlib.eof:
            raise ProtocolError(Violation.BAD_COMPRESSION, "peer ended the zlib stream")
        return decode_header_block(raw, self._limits.max_header_count)


# --- frames ------------------------------------------------------------------------------


def control_frame(frame_type: int, flags: int, body: bytes) -> bytes:
    """Frame ``body`` as a SPDY/3 control frame."""
    return (
        _HEADER.pack(0x8000_0000 | SPDY_VERSION << 16 | frame_type, flags << 24 | len(body)) + body
    )


def data_frame(stream_id: int, data: bytes, fin: bool = False) -> bytes:
    """Frame ``data`` (at most 16 MiB - 1) as one SPDY DATA frame."""
    return (
        _HEADER.pack(stream_id & _MAX_STREAM_ID, (FLAG_FIN if fin else 0) << 24 | len(data)) + data
    )


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
        if stream_id > _MAX_STREAM_ID:
            raise ConnectionClosedError("stream ids exhausted")
        self._next_stream_id += 2
        flags = (FLAG_FIN if fin else 0) | (FLAG_UNIDIRECTIONAL if unidirectional else 0)
        block = self._compressor.compress(headers)
        body = _U32.pack(stream_id) + _U32.pack(0) + b"\x00\x00" + block
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
            FrameType.SYN_REPLY, FLAG_FIN if fin else 0, _U32.pack(stream_id) + block
        )
        self._close_local(stream_id, fin)

    def send_headers(self, stream_id: int, headers: HeadersIn, *, fin: bool = False) -> None:
        self._replied(stream_id)
        block = self._compressor.compress(headers)
        self._outbound += control_frame(
            FrameType.HEADERS, FLAG_FIN if fin else 0, _U32.pack(stream_id) + block
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
        if not 0 < stream_id <= _MAX_STREAM_ID or not 0 < status <= 0xFFFF_FFFF:
            raise ValueError("RST_STREAM needs a stream id and a non-zero status")
        self._outbound += control_frame(FrameType.RST_STREAM, 0, _HEADER.pack(stream_id, status))
        self._streams.pop(stream_id, None)

    def goaway(self, status: int = GoAwayStatus.OK) -> None:
        """Send GOAWAY once; later SYN_STREAMs from the peer are ignored."""
        if self._goaway_sent:
            return
        self._goaway_sent = True
        body = _HEADER.pack(self._last_peer_stream_id, status)
        self._outbound += control_frame(FrameType.GOAWAY, 0, body)

    def ping(self, ping_id: int | None = None) -> int:
        """Send PING (by default with the next id of our parity) and return its id."""
        if ping_id is None:
            ping_id = self._next_ping_id
            step = self._next_ping_id + 2
            self._next_ping_id = step if step <= _MAX_STREAM_ID else step - (_MAX_STREAM_ID - 1)
        elif not 0 <= ping_id <= 0xFFFF_FFFF:
            raise ValueError("PING id must fit in 32 bits")
        self._outbound += control_frame(FrameType.PING, 0, _U32.pack(ping_id))
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
            first, second = _HEADER.unpack_from(buf, pos)
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
        stream_id, associated = _HEADER.unpack_from(body, 0)
        stream_id &= _MAX_STREAM_ID
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
            StreamOpened(
                stream_id, headers, fin, one_way, associated & _MAX_STREAM_ID, body[8] >> 5
            )
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
        stream_id = _U32.unpack_from(body, 0)[0] & _MAX_STREAM_ID
        headers = self._decompressor.decompress(body[4:])
        if stream_id == 0:
            raise ProtocolError(Violation.ZERO_STREAM_ID, name)
        return stream_id, headers

    def _on_rst_stream(self, flags: int, body: bytes, events: list[Event]) -> None:
        stream_id, status = _fixed_pair(body, "RST_STREAM")
        stream_id &= _MAX_STREAM_ID
        if stream_id == 0:
            raise ProtocolError(Violation.ZERO_STREAM_ID, "RST_STREAM")
        if status == 0:
            raise ProtocolError(Violation.BAD_FRAME, "RST_STREAM status 0")
        if self._streams.pop(stream_id, None) is not None:
            events.append(StreamReset(stream_id, status))

    def _on_settings(self, flags: int, body: bytes, events: list[Event]) -> None:
        if len(body) < 4 or len(body) != 4 + 8 * _U32.unpack_from(body, 0)[0]:
            raise ProtocolError(Violation.BAD_FRAME, "SETTINGS length")
        settings = {key & 0xFF_FFFF: value for key, value in _HEADER.iter_unpack(body[4:])}
        events.append(SettingsReceived(settings, bool(flags & 0x01)))

    def _on_ping(self, flags: int, body: bytes, events: list[Event]) -> None:
        if len(body) != 4:
            raise ProtocolError(Violation.BAD_FRAME, "PING length")
        (ping_id,) = _U32.unpack(body)
        if ping_id % 2 == self._next_ping_id % 2:
            events.append(PingAcknowledged(ping_id))
            return
        self._outbound += control_frame(FrameType.PING, 0, body)
        events.append(PingReceived(ping_id))

    def _on_goaway(self, flags: int, body: bytes, events: list[Event]) -> None:
        last_good, status = _fixed_pair(body, "GOAWAY")
        self._goaway_received = True
        events.append(GoAwayReceived(last_good & _MAX_STREAM_ID, status))

    def _on_window_update(self, flags: int, body: bytes, events: list[Event]) -> None:
        stream_id, delta = _fixed_pair(body, "WINDOW_UPDATE")
        events.append(WindowUpdateReceived(stream_id & _MAX_STREAM_ID, delta & _MAX_STREAM_ID))


def _fixed_pair(body: bytes, name: str) -> tuple[int, int]:
    if len(body) != 8:
        raise ProtocolError(Violation.BAD_FRAME, f"{name} length {len(body)}")
    first, second = _HEADER.unpack(body)
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
