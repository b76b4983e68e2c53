"""`/pods` reuses each unchanged pod's JSON and never serves a replaced pod's old one."""

from __future__ import annotations

import json

from vkpy.api.endpoints.pod_list import PodListEncoder, chunks, length
from vkpy.core.objects import KubeObject


def pod(name: str, phase: str = "Running") -> KubeObject:
    return {
        "metadata": {"name": name, "namespace": "ns", "uid": f"uid-{name}"},
        "spec": {"containers": [{"name": "app", "image": "busybox"}]},
        "status": {"phase": phase},
    }


def test_the_body_is_the_podlist_the_standard_encoder_gives() -> None:
    pods = [pod("a"), pod("b"), pod("c")]
    body = PodListEncoder().encode(pods)
    assert json.loads(body) == {
        "kind": "PodList",
        "apiVersion": "v1",
        "metadata": {},
        "items": pods,
    }
    assert json.loads(PodListEncoder().encode([])) == {
        "kind": "PodList",
        "apiVersion": "v1",
        "metadata": {},
        "items": [],
    }


def test_only_new_and_replaced_pods_are_encoded_again() -> None:
    encoder = PodListEncoder()
    pods = [pod(f"p{n}") for n in range(100)]
    encoder.encode(pods)
    assert encoder.encoded_pods == 100
    encoder.encode(pods)
    assert encoder.encoded_pods == 100  # nothing changed: nothing encoded

    pods[7] = pod("p7", phase="Succeeded")  # the controller replaces a changed pod
    pods.append(pod("new"))
    del pods[0]
    body = json.loads(encoder.encode(pods))
    assert encoder.encoded_pods == 102
    names = [p["metadata"]["name"] for p in body["items"]]
    assert names == [f"p{n}" for n in range(1, 100)] + ["new"]
    assert body["items"][6]["status"]["phase"] == "Succeeded"


def test_a_pod_gone_and_back_as_another_object_is_not_served_stale() -> None:
    encoder = PodListEncoder()
    encoder.encode([pod("a", "Pending")])
    encoder.encode([])  # gone: its encoding is dropped
    body = json.loads(encoder.encode([pod("a", "Running")]))
    assert body["items"][0]["status"]["phase"] == "Running"


def test_chunks_make_the_same_body_of_the_announced_length() -> None:
    pods = [pod(f"p{n}") for n in range(300)]
    encoder = PodListEncoder()
    pieces = encoder.pieces(pods)
    parts = list(chunks(pieces, size=4096))
    assert len(parts) > 10  # several chunks, each about the size asked
    assert all(len(part) < 4096 + 400 for part in parts)
    body = b"".join(parts)
    assert len(body) == length(pieces)
    assert json.loads(body)["items"] == pods
    assert length([]) == len(b"".join(chunks([])))
