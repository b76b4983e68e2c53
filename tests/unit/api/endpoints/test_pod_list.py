"""`/pods` is the PodList of each pod's JSON as its record holds it: a settled pod is
sent as its packed JSON inflated (neither decoded nor encoded), a pod replaced since
is sent as it is now, and the chunks make the body they announce."""

from __future__ import annotations

import json

from vkpy.api.endpoints.pod_list import chunks, length
from vkpy.core.objects import KubeObject
from vkpy.node.pods.pod_record import PodRecord
from vkpy.providers.base import PodRef


def pod(name: str, phase: str = "Running", rv: str = "1") -> KubeObject:
    return {
        "metadata": {"name": name, "namespace": "ns", "uid": f"uid-{name}", "resourceVersion": rv},
        "spec": {"containers": [{"name": "app", "image": "busybox"}]},
        "status": {"phase": phase},
    }


def body(records: list[PodRecord]) -> KubeObject:
    pieces = [r.json() for r in records if r.present]
    joined = b"".join(chunks(pieces))
    assert len(joined) == length(pieces)
    parsed: KubeObject = json.loads(joined)
    return parsed


def test_the_body_is_the_podlist_of_the_pods_held() -> None:
    pods = [pod("a"), pod("b"), pod("c")]
    records = [PodRecord(PodRef("ns", p["metadata"]["name"], "u"), p) for p in pods]
    records[1].settle()  # one packed, two decoded (a sync under way)
    assert body(records) == {"kind": "PodList", "apiVersion": "v1", "metadata": {}, "items": pods}
    assert body([]) == {"kind": "PodList", "apiVersion": "v1", "metadata": {}, "items": []}


def test_a_settled_pod_is_sent_as_its_packed_json_without_decoding() -> None:
    record = PodRecord(PodRef("ns", "a", "u"), pod("a"))
    record.settle()
    first = record.json()
    assert json.loads(first) == pod("a") and record.json() == first
    assert record._pod is None  # nothing decoded to send it


def test_a_replaced_or_gone_pod_is_never_sent_stale() -> None:
    record = PodRecord(PodRef("ns", "a", "u"), pod("a", "Pending"))
    record.settle()
    record.pod = pod("a", "Running", rv="2")
    assert body([record])["items"][0]["status"]["phase"] == "Running"
    record.settle()
    assert body([record])["items"][0]["status"]["phase"] == "Running"
    record.pod = None
    assert body([record])["items"] == []


def test_chunks_make_the_same_body_of_the_announced_length() -> None:
    pods = [pod(f"p{n}") for n in range(300)]
    pieces = [json.dumps(p).encode() for p in pods]
    parts = list(chunks(pieces, size=4096))
    assert len(parts) > 10  # several chunks, each about the size asked
    assert all(len(part) < 4096 + 400 for part in parts)
    joined = b"".join(parts)
    assert len(joined) == length(pieces)
    assert json.loads(joined)["items"] == pods
    assert length([]) == len(b"".join(chunks([])))
