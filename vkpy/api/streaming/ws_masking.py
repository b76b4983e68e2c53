"""The one WebSocket rule aiohttp's server does not enforce: client frames are masked.

RFC 6455 section 5.1: a server must close the connection (status 1002, protocol
error) when a client sends a frame without a mask. aiohttp's frame reader unmasks
masked frames and takes unmasked ones as they are, so `MaskCheck` sits in front of
it (in the place aiohttp feeds the upgraded connection's bytes) and follows the
frame headers: it reads each header byte by byte (at most 14) and skips payloads in
one step, so it costs next to nothing. At the first unmasked frame it stops feeding
the reader and calls `on_violation` once.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any


def _header_size(head: bytearray) -> int | None:
    """The full size of a frame header whose first bytes are `head` (None: unknown yet)."""
    if len(head) < 2:
        return None
    length7 = head[1] & 0x7F
    extended = 0 if length7 < 126 else 2 if length7 == 126 else 8
    return 2 + extended + (4 if head[1] & 0x80 else 0)


def _payload_length(head: bytearray) -> int:
    length7 = head[1] & 0x7F
    if length7 < 126:
        return length7
    width = 2 if length7 == 126 else 8
    return int.from_bytes(head[2 : 2 + width], "big")


class MaskCheck:
    """Wraps aiohttp's WebSocketReader (same `feed_data`/`feed_eof` shape)."""

    def __init__(self, reader: Any, on_violation: Callable[[], None]) -> None:
        self._reader = reader
        self._on_violation = on_violation
        self._head = bytearray()
        self._skip = 0
        self.violated = False

    def feed_data(self, data: bytes) -> tuple[bool, bytes]:
        if self.violated:
            return False, b""
        if not self._scan(memoryview(data)):
            self.violated = True
            self._on_violation()
            return False, b""
        result: tuple[bool, bytes] = self._reader.feed_data(data)
        return result

    def feed_eof(self) -> None:
        self._reader.feed_eof()

    def _scan(self, data: memoryview) -> bool:
        """Follow the frames in `data`; False at an unmasked one."""
        pos, end = 0, len(data)
        while pos < end:
            if self._skip:
                step = min(self._skip, end - pos)
                self._skip -= step
                pos += step
                continue
            self._head.append(data[pos])
            pos += 1
            if len(self._head) == 2 and not self._head[1] & 0x80:
                return False
            size = _header_size(self._head)
            if size is None or len(self._head) < size:
                continue
            self._skip = _payload_length(self._head)
            self._head.clear()
        return True
