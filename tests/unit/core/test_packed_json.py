"""Pods kept compressed: what goes in comes out, and a pod as the API server writes
it keeps a fraction of its JSON (issue 30: the kept JSON was the largest part of the
agent's memory at 1000 nodes with 10 pods each)."""

from __future__ import annotations

import json
import tracemalloc
from pathlib import Path
from typing import Any

import orjson

from vkpy.core import jsoncodec, packed_json

POD = Path(__file__).parent / "data" / "deployment_pod.json"


def api_pod() -> dict[str, Any]:
    """A running pod as the dev cluster's API server returned it (a Deployment's
    replica of nginx:alpine, managedFields dropped) with the status vkpy wrote."""
    pod: dict[str, Any] = json.loads(POD.read_text())
    return pod


def test_what_is_packed_unpacks_equal_and_its_json_byte_for_byte() -> None:
    pod = api_pod()
    packed = packed_json.pack(pod)
    assert packed_json.unpack(packed) == pod
    assert packed_json.json_of(packed) == orjson.dumps(pod)
    assert packed_json.unpack(packed) is not packed_json.unpack(packed)  # a fresh copy each
    odds: tuple[object, ...] = (None, [], {}, "ü" * 5000, {"k": list(range(3000))})
    for odd in odds:
        assert packed_json.unpack(packed_json.pack(odd)) == odd


def test_a_pod_as_the_api_server_writes_it_keeps_under_a_fifth_of_its_json() -> None:
    pod = api_pod()
    size = len(orjson.dumps(pod))
    packed = len(packed_json.pack(pod))
    assert packed * 5 < size, (packed, size)
    # the status vkpy decided for it, in the order pod_status writes it
    running = pod["status"]
    status = {
        "phase": "Running",
        "reason": None,
        "message": None,
        **{key: running[key] for key in ("hostIP", "hostIPs", "podIP", "podIPs", "startTime")},
        "containerStatuses": [
            {
                "name": "nginx",
                "image": "nginx:alpine",
                "imageID": "",
                "ready": True,
                "started": True,
                "restartCount": 0,
                "state": {"running": {"startedAt": "2026-12-06T00:12:09Z"}},
                "lastState": {},
            }
        ],
        "conditions": [
            {"type": c["type"], "status": "True", "lastProbeTime": None, "lastTransitionTime": t}
            for c in running["conditions"]
            for t in [c["lastTransitionTime"]]
        ],
    }
    assert len(packed_json.pack(status)) * 5 < len(orjson.dumps(status))


def test_an_unlike_pod_still_packs_smaller_than_its_json() -> None:
    """The dictionary helps only what resembles it; anything else is plain deflate."""
    pod = {"metadata": {"name": "x" * 40, "annotations": {f"a{n}": "v" * n for n in range(60)}}}
    assert len(packed_json.pack(pod)) < len(orjson.dumps(pod))


def test_a_packed_value_holds_its_size_not_the_encoders_buffer() -> None:
    """orjson answers in the buffer it grew while writing (8 KiB for a 2.3 KiB pod): a
    value kept for hours holds only its own bytes."""
    pod = {
        "metadata": {"name": "p0", "labels": {"app": "bench"}},
        "spec": {
            "containers": [{"name": f"c{n}", "image": "example.com/app:1"} for n in range(20)]
        },
    }
    text = jsoncodec.dumps(pod)
    assert packed_json.json_of(packed_json.pack(pod)) == text
    assert packed_json.unpack(packed_json.pack(pod)) == pod
    size = len(packed_json.pack(pod))
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        kept = [packed_json.pack(pod) for _ in range(100)]
        packed = (tracemalloc.get_traced_memory()[0] - before) / len(kept)
        before = tracemalloc.get_traced_memory()[0]
        dumped = [jsoncodec.dumps(pod) for _ in range(100)]
        plain = (tracemalloc.get_traced_memory()[0] - before) / len(dumped)
    finally:
        tracemalloc.stop()
    assert packed < size + 64, (packed, size)
    assert plain > packed  # what `dumps` answers is a bigger block (orjson's buffer)
