"""jsoncodec.pack: what vkpy keeps as JSON holds its own size (issue 30)."""

from __future__ import annotations

import tracemalloc

from vkpy.core import jsoncodec

POD = {
    "metadata": {"name": "p0", "labels": {"app": "bench"}},
    "spec": {"containers": [{"name": f"c{n}", "image": "example.com/app:1"} for n in range(20)]},
}


def test_a_packed_value_holds_its_size_not_the_encoders_buffer() -> None:
    text = jsoncodec.dumps(POD)
    assert jsoncodec.pack(POD) == text
    assert jsoncodec.loads(jsoncodec.pack(POD)) == POD
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        kept = [jsoncodec.pack(POD) for _ in range(100)]
        packed = (tracemalloc.get_traced_memory()[0] - before) / len(kept)
        before = tracemalloc.get_traced_memory()[0]
        dumped = [jsoncodec.dumps(POD) for _ in range(100)]
        plain = (tracemalloc.get_traced_memory()[0] - before) / len(dumped)
    finally:
        tracemalloc.stop()
    assert packed < len(text) + 64, (packed, len(text))
    assert plain > packed  # what `dumps` answers is a bigger block (orjson's buffer)
