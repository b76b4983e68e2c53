"""SPDY/3.1 on the wire: frame layout, header blocks, events and errors.

The pieces of vkpy.streams.spdy that do not depend on connection state: the
constants and status codes, the typed errors, the events a connection reports, the
header-block codec (zlib with the SPDY/3 dictionary, one context per direction) and
the frame builders. Kept apart so the connection logic stays readable; import them
from vkpy.streams.spdy, which re-exports them.
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
MAX_STREAM_ID = 0x7FFF_FFFF
FRAME_HEADER = struct.Struct(">II")
U32 = struct.Struct(">I")
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
    parts = [U32.pack(len(merged))]
    for key, text in merged.items():
        for item in (key, text):
            raw = item.encode("utf-8", "surrogateescape")
            parts.append(U32.pack(len(raw)))
            parts.append(raw)
    return b"".join(parts)


def decode_header_block(block: bytes, max_count: int = 1024) -> dict[str, str]:
    """Parse an uncompressed SPDY/3 block; uppercase names are lowercased and repeats merged."""
    if len(block) < 4:
        raise ProtocolError(Violation.BAD_HEADER_BLOCK, "no pair count")
    (count,) = U32.unpack_from(block, 0)
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
    (size,) = U32.unpack_from(block, pos)
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
        FRAME_HEADER.pack(0x8000_0000 | SPDY_VERSION << 16 | frame_type, flags << 24 | len(body))
        + body
    )


def data_frame(stream_id: int, data: bytes, fin: bool = False) -> bytes:
    """Frame ``data`` (at most 16 MiB - 1) as one SPDY DATA frame."""
    return (
        FRAME_HEADER.pack(stream_id & MAX_STREAM_ID, (FLAG_FIN if fin else 0) << 24 | len(data))
        + data
    )
