"""--pod-deletion-cost as a step of a pod's life: the annotation is written once on the
node's ReplicaSet pods, before the pod is created in the backend, and costs no
second sync (issue 28: it was a side write of the controller's sync)."""

from __future__ import annotations

from typing import Any

from tests.unit.pod_harness import Harness, pod
from vkpy.kube.client import ApiError
from vkpy.node.pods.deletion_cost import ANNOTATION

OWNED = {
    "ownerReferences": [
        {"kind": "ReplicaSet", "name": "web-5d8", "uid": "rs-1", "controller": True}
    ]
}


def replica(name: str, **metadata: Any) -> dict[str, Any]:
    obj = pod(name)
    obj["metadata"].update(OWNED, **metadata)
    return obj


def cost_patches(h: Harness, name: str) -> int:
    return len(h.kube.requests_to("PATCH", rf"/pods/{name}$"))


async def test_a_replicaset_pod_gets_the_cost_once_and_one_sync() -> None:
    async with Harness(deletion_cost=-100) as h:
        await h.start()
        p = h.kube.add_pod(replica("web"))
        await h.clock.advance(120)
        current = h.current(p)
        assert current["metadata"]["annotations"][ANNOTATION] == "-100"
        assert current["status"]["phase"] == "Running"
        assert cost_patches(h, "web") == 1
        # the annotation's own echo asks nothing: one sync, one read of the backend
        assert h.backend.count("status", p["metadata"]["uid"]) == 1


async def test_no_cost_for_other_pods_or_when_off() -> None:
    async with Harness(deletion_cost=-100) as h:
        await h.start()
        h.kube.add_pod(pod("bare"))
        h.kube.add_pod(replica("mine", annotations={ANNOTATION: "5"}))
        await h.clock.advance(60)
        assert cost_patches(h, "bare") == 0
        assert cost_patches(h, "mine") == 0
        assert h.kube.pod("ns", "mine")["metadata"]["annotations"][ANNOTATION] == "5"  # type: ignore[index]
    async with Harness() as h:
        await h.start()
        p = h.kube.add_pod(replica("web"))
        await h.clock.advance(60)
        assert cost_patches(h, "web") == 0
        assert ANNOTATION not in (h.current(p)["metadata"].get("annotations") or {})


async def test_a_failed_cost_write_holds_nothing_back_and_is_tried_at_the_next_sync() -> None:
    async with Harness(deletion_cost=-100) as h:
        await h.start()
        h.kube.fail("PATCH", r"/pods/web$", ApiError(500, "InternalError", "etcd timeout"))
        p = h.kube.add_pod(replica("web"))
        await h.clock.advance(1)
        assert h.current(p)["status"]["phase"] == "Running"
        assert ANNOTATION not in (h.current(p)["metadata"].get("annotations") or {})
        h.kube.update_pod(p, metadata={"labels": {"tier": "front"}})  # the next sync
        await h.clock.advance(1)
        assert h.current(p)["metadata"]["annotations"][ANNOTATION] == "-100"
        assert cost_patches(h, "web") == 2
