"""JSON encoding and decoding for every hot path, in one place.

A busy node decodes every watched pod and encodes every status patch and Event;
profiling a 1000-pod burst (docs/benchmarks.md, issue 17) put the standard library's
json among the largest costs. orjson does the same work several times faster and
returns bytes, which aiohttp sends as they are. Keeping the choice here means a
caller never depends on which codec runs, and tests can compare with `json`.
"""

from __future__ import annotations

from typing import Any

import orjson

JSONDecodeError = orjson.JSONDecodeError
"""Raised by `loads` on malformed input (a ValueError)."""


def loads(data: bytes | bytearray | memoryview | str) -> Any:
    """Decode one JSON document."""
    return orjson.loads(data)


def dumps(value: object) -> bytes:
    """Encode compactly (no spaces), as UTF-8 bytes; non-str dict keys are an error."""
    return orjson.dumps(value)


def dumps_text(value: object) -> str:
    """`dumps`, as text (for APIs that want str)."""
    return orjson.dumps(value).decode()
