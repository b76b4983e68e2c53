"""The channel.k8s.io family of WebSocket subprotocols as a sans-IO codec, for exec, attach and
port-forward clients that reach the kubelet over WebSocket instead of SPDY.

aiohttp does the WebSocket framing; what is left is the Kubernetes layer inside each
message: a leading channel byte (stdin 0, stdout 1, stderr 2, error 3, resize 4) in the
binary protocols, an ASCII digit plus base64 payload in the ``base64.`` ones, and in
``v5.channel.k8s.io`` the two-byte ``[255, channel]`` message that half-closes a channel.
Port-forward reuses the framing with a data/error channel pair per port whose first
message carries the port number.  The terminal-resize stream, over both WebSocket and
SPDY, is a run of JSON objects that Go's ``json.Decoder`` reads back to back; the
incremental ``ResizeDecoder`` here accepts exactly that and rejects anything else.
"""

from __future__ import annotations

import binascii
import enum
import json
import struct
from collections.abc import Sequence
from dataclasses import dataclass
from typing import NamedTuple

CHANNEL_V1 = "channel.k8s.io"
BASE64_CHANNEL_V1 = "base64.channel.k8s.io"
CHANNEL_V4 = "v4.channel.k8s.io"
BASE64_CHANNEL_V4 = "v4.base64.channel.k8s.io"
CHANNEL_V5 = "v5.channel.k8s.io"
NO_SUBPROTOCOL = ""
"""Chosen when the client offers no subprotocol: binary framing, version 1 semantics."""

REMOTECOMMAND_PROTOCOLS: tuple[str, ...] = (
    CHANNEL_V5,
    CHANNEL_V4,
    BASE64_CHANNEL_V4,
    CHANNEL_V1,
    BASE64_CHANNEL_V1,
    NO_SUBPROTOCOL,
)
"""What the kubelet accepts for exec/attach over WebSocket."""
PORTFORWARD_PROTOCOLS: tuple[str, ...] = (CHANNEL_V4, BASE64_CHANNEL_V4, NO_SUBPROTOCOL)
"""What the kubelet accepts for port-forward over WebSocket."""

CLOSE_SIGNAL = 255
_BASE64_FIRST_CHANNEL = ord("0")
_MAX_BASE64_CHANNEL = 0x7F - _BASE64_FIRST_CHANNEL


class Channel(enum.IntEnum):
    STDIN = 0
    STDOUT = 1
    STDERR = 2
    ERROR = 3
    RESIZE = 4


class ProtocolError(ValueError):
    """A message (or resize stream) that breaks the channel protocol."""


@dataclass(frozen=True, slots=True)
class ProtocolInfo:
    name: str
    base64: bool
    """Text messages: ASCII digit channel + base64 payload."""
    close_signal: bool
    """``[255, channel]`` half-closes a channel (v5)."""
    status_json: bool
    """The error channel carries a metav1.Status JSON (v4, v5) rather than plain text."""


_PROTOCOLS = {
    NO_SUBPROTOCOL: ProtocolInfo(NO_SUBPROTOCOL, False, False, False),
    CHANNEL_V1: ProtocolInfo(CHANNEL_V1, False, False, False),
    BASE64_CHANNEL_V1: ProtocolInfo(BASE64_CHANNEL_V1, True, False, False),
    CHANNEL_V4: ProtocolInfo(CHANNEL_V4, False, False, True),
    BASE64_CHANNEL_V4: ProtocolInfo(BASE64_CHANNEL_V4, True, False, True),
    CHANNEL_V5: ProtocolInfo(CHANNEL_V5, False, True, True),
}


@dataclass(frozen=True, slots=True)
class ChannelMessage:
    channel: int
    data: bytes


@dataclass(frozen=True, slots=True)
class CloseChannel:
    """v5: the peer will send nothing more on ``channel``."""

    channel: int


def protocol_info(protocol: str) -> ProtocolInfo:
    """Describe a subprotocol; ``ValueError`` for one this module does not know."""
    try:
        return _PROTOCOLS[protocol]
    except KeyError:
        raise ValueError(f"unknown channel subprotocol {protocol!r}") from None


def split_offered(header_values: Sequence[str]) -> list[str]:
    """Turn Sec-WebSocket-Protocol header values (comma lists) into protocol names."""
    return [name.strip() for value in header_values for name in value.split(",") if name.strip()]


def negotiate(
    offered: Sequence[str], supported: Sequence[str] = REMOTECOMMAND_PROTOCOLS
) -> str | None:
    """The first offered protocol we support; ``""`` if none was offered and that is allowed.

    ``None`` means there is no common protocol and the upgrade must be refused.
    """
    names = split_offered(offered)
    if not names:
        return NO_SUBPROTOCOL if NO_SUBPROTOCOL in supported else None
    return next((name for name in names if name and name in supported), None)


def encode(protocol: str, channel: int, data: bytes) -> bytes | str:
    """One WebSocket message for ``data`` on ``channel``: bytes (binary) or str (text)."""
    info = protocol_info(protocol)
    if info.base64:
        if not 0 <= channel <= _MAX_BASE64_CHANNEL:
            raise ValueError(f"channel {channel} cannot be written as one ASCII character")
        text = binascii.b2a_base64(data, newline=False).decode("ascii")
        return chr(_BASE64_FIRST_CHANNEL + channel) + text
    if not 0 <= channel <= 0xFF or (info.close_signal and channel == CLOSE_SIGNAL):
        raise ValueError(f"invalid channel {channel}")
    return bytes((channel,)) + bytes(data)


def encode_close(protocol: str, channel: int) -> bytes:
    """The v5 message that half-closes ``channel``."""
    if not protocol_info(protocol).close_signal:
        raise ValueError(f"{protocol!r} has no close signal")
    if not 0 <= channel < CLOSE_SIGNAL:
        raise ValueError(f"invalid channel {channel}")
    return bytes((CLOSE_SIGNAL, channel))


def decode(protocol: str, message: bytes | str) -> ChannelMessage | CloseChannel | None:
    """Parse one received WebSocket message; ``None`` for an empty one (to be ignored)."""
    info = protocol_info(protocol)
    raw = message.encode("utf-8") if isinstance(message, str) else bytes(message)
    if not raw:
        return None
    if info.close_signal and raw[0] == CLOSE_SIGNAL:
        if len(raw) != 2:
            raise ProtocolError(f"close signal of {len(raw)} bytes")
        return CloseChannel(raw[1])
    if not info.base64:
        return ChannelMessage(raw[0], raw[1:])
    channel = raw[0] - _BASE64_FIRST_CHANNEL
    if not 0 <= channel <= _MAX_BASE64_CHANNEL:
        raise ProtocolError(f"bad base64 channel character {raw[:1]!r}")
    return ChannelMessage(channel, _decode_base64(raw[1:]))


def _decode_base64(text: bytes) -> bytes:
    compact = text.replace(b"\r", b"").replace(b"\n", b"")
    try:
        return binascii.a2b_base64(compact, strict_mode=True)
    except binascii.Error as exc:
        raise ProtocolError(f"bad base64 payload: {exc}") from None


# --- port-forward over WebSocket -------------------------------------------------------------


def port_forward_channels(index: int) -> tuple[int, int]:
    """The (data, error) channels of the ``index``-th requested port."""
    if index < 0:
        raise ValueError("negative port index")
    return 2 * index, 2 * index + 1


def port_forward_index(channel: int) -> tuple[int, bool]:
    """(port index, is the error channel) for a channel number."""
    return channel // 2, bool(channel % 2)


def encode_port_prefix(port: int) -> bytes:
    """The first payload on each port-forward channel: the port, little-endian uint16."""
    if not 0 < port <= 0xFFFF:
        raise ValueError(f"invalid port {port}")
    return struct.pack("<H", port)


def decode_port_prefix(payload: bytes) -> tuple[int, bytes]:
    """Split the first payload of a port-forward channel into (port, remaining data)."""
    if len(payload) < 2:
        raise ProtocolError("port-forward channel opened without a port")
    return struct.unpack_from("<H", payload)[0], payload[2:]


# --- terminal resize ---------------------------------------------------------------------------


class TerminalSize(NamedTuple):
    width: int
    height: int


def encode_resize(width: int, height: int) -> bytes:
    """One resize event as a client writes it (Go's json.Encoder: object + newline)."""
    return json.dumps({"Width": width, "Height": height}, separators=(",", ":")).encode() + b"\n"


class ResizeDecoder:
    """Incremental reader of back-to-back ``{"Width":W,"Height":H}`` objects.

    Whitespace (newlines) between objects is skipped; keys match case-insensitively as
    in Go's encoding/json; unknown keys are ignored; values must be integers 0..65535 or
    null.  Anything else, or an object longer than ``max_object`` bytes, raises
    ``ProtocolError``; the stream is unusable afterwards, as in the kubelet.
    """

    _MAX_DEPTH = 16

    def __init__(self, max_object: int = 4096) -> None:
        self._max_object = max_object
        self._buffer = bytearray()
        self._scanned = 0
        self._depth = 0
        self._in_string = False
        self._escaped = False
        self._error: ProtocolError | None = None

    @property
    def pending(self) -> int:
        """Bytes held for an object that is not complete yet."""
        return len(self._buffer)

    def feed(self, data: bytes) -> list[TerminalSize]:
        if self._error is not None:
            raise self._error
        self._buffer += data
        try:
            return self._drain()
        except ProtocolError as exc:
            self._error = exc
            self._buffer.clear()
            raise

    def _drain(self) -> list[TerminalSize]:
        sizes: list[TerminalSize] = []
        while True:
            end = self._scan()
            if end is None:
                if len(self._buffer) > self._max_object:
                    raise ProtocolError("resize object too long")
                return sizes
            sizes.append(_parse_size(bytes(self._buffer[:end])))
            del self._buffer[:end]
            self._scanned = 0

    def _scan(self) -> int | None:
        """Index just past the first complete object in the buffer, if there is one."""
        buf = self._buffer
        if self._depth == 0:
            start = len(buf) - len(bytes(buf).lstrip(b" \t\r\n"))
            del buf[:start]
            self._scanned = 0
            if buf and buf[0] != ord("{"):
                raise ProtocolError(f"resize stream has {bytes(buf[:1])!r} where an object starts")
        for index in range(self._scanned, len(buf)):
            if self._step(buf[index]):
                self._scanned = 0
                return index + 1
        self._scanned = len(buf)
        return None

    def _step(self, byte: int) -> bool:
        """Advance the scanner by one byte; True when it closes the top-level object."""
        if self._in_string:
            if self._escaped:
                self._escaped = False
            elif byte == 0x5C:  # backslash
                self._escaped = True
            elif byte == 0x22:  # quote
                self._in_string = False
            return False
        if byte == 0x22:
            self._in_string = True
        elif byte == 0x7B:  # {
            self._depth += 1
            if self._depth > self._MAX_DEPTH:
                raise ProtocolError("resize object nested too deeply")
        elif byte == 0x7D:  # }
            self._depth -= 1
            return self._depth == 0
        return False


def _parse_size(raw: bytes) -> TerminalSize:
    try:
        obj = json.loads(raw.decode("utf-8"), parse_constant=_reject_constant)
    except (ValueError, RecursionError) as exc:
        raise ProtocolError(f"resize event is not JSON: {exc}") from None
    if not isinstance(obj, dict):
        raise ProtocolError("resize event is not an object")
    size = {"width": 0, "height": 0}
    for key, value in obj.items():
        field = key.casefold()
        if field in size and value is not None:
            size[field] = _dimension(value)
    return TerminalSize(size["width"], size["height"])


def _dimension(value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= 0xFFFF:
        raise ProtocolError(f"terminal dimension {value!r} is not a uint16")
    return value


def _reject_constant(name: str) -> object:
    raise ProtocolError(f"{name} is not JSON")
