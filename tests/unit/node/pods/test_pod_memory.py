"""What a running pod costs the agent in memory, and that keeping it small changes
nothing the kubelet does (issue 30, docs/scale.md's seventh round).

A pod between syncs is kept packed (its JSON) rather than as the dicts the watch
decoded: at 1000 nodes with 10 pods each, those dicts were the largest share of the
agent's memory. These tests measure what the controller holds per running pod, and
check that a settled pod still reads, changes and syncs as before.
"""

from __future__ import annotations

from typing import Any

from tests.unit.fake_clock import settle
from tests.unit.pod_harness import Harness, pod
from tests.unit.retained import retained_bytes
from vkpy.node.pods.pod_controller import PodController
from vkpy.node.pods.pod_record import PodRecord
from vkpy.providers.base import PodRef

PODS = 40


def realistic(name: str) -> dict[str, Any]:
    """A pod with the fields the API server defaults (the service account's token
    volume left out: the fake API server has no token to give)."""
    body = pod(
        name,
        dnsPolicy="ClusterFirst",
        enableServiceLinks=True,
        preemptionPolicy="PreemptLowerPriority",
        priority=0,
        schedulerName="default-scheduler",
        securityContext={},
        serviceAccountName="default",
        terminationGracePeriodSeconds=30,
        tolerations=[
            {"key": "node.kubernetes.io/not-ready", "operator": "Exists", "effect": "NoExecute"},
            {"key": "node.kubernetes.io/unreachable", "operator": "Exists", "effect": "NoExecute"},
        ],
    )
    body["metadata"]["labels"] = {"app": "bench", "pod-template-hash": "5d8f7c9b6"}
    return body


def records(controller: PodController) -> dict[str, PodRecord]:
    found: dict[str, PodRecord] = controller._records
    return found


async def test_a_running_pod_is_held_packed_in_under_a_third_of_its_dicts() -> None:
    async with Harness() as h:
        controller = await h.start()
        for n in range(PODS):
            h.kube.add_pod(realistic(f"p{n}"))
        await settle()
        for n in range(PODS):
            assert h.kube.pod("ns", f"p{n}")["status"]["phase"] == "Running"  # type: ignore[index]
        held = records(controller)
        assert len(held) == PODS
        packed = retained_bytes(held) / PODS
        # the same records with every object decoded, as every record was before
        for record in held.values():
            assert record.pod is not None
        decoded = retained_bytes(held) / PODS
        assert packed * 3 < decoded, (packed, decoded)
        # 3.4 KiB with the JSON kept as is, 1.4 KiB with it deflated (packed_json)
        assert packed < 1600, packed


async def test_a_settled_pod_reads_whole_and_stays_packed() -> None:
    async with Harness() as h:
        controller = await h.start()
        created = h.kube.add_pod(realistic("p0"))
        await settle()
        current = h.current(created)
        assert current["status"]["phase"] == "Running"
        found = controller.find("ns", "p0")
        assert found == current
        assert controller.pods() == [current]
        (record,) = records(controller).values()
        assert record._pod is None, "reading it for the kubelet API decodes a copy only"
        found["metadata"]["labels"]["changed"] = "by the reader"
        assert controller.find("ns", "p0") == current, "a reader's copy is its own"


async def test_a_change_to_a_settled_pod_is_synced_and_an_echo_is_not() -> None:
    async with Harness() as h:
        controller = await h.start()
        created = h.kube.add_pod(realistic("p0"))
        await settle()
        uid = created["metadata"]["uid"]
        syncs = h.backend.count("status", uid)
        running = h.current(created)
        h.kube.update_pod(running, metadata={**running["metadata"], "labels": {"x": "1"}})
        await settle()
        assert h.backend.count("status", uid) == syncs + 1, "a metadata change is synced"
        (record,) = records(controller).values()
        assert record._pod is None and record.present
        assert controller.find("ns", "p0") == h.current(created)
        h.kube.update_pod(h.current(created))  # a bare resourceVersion bump
        await settle()
        assert h.backend.count("status", uid) == syncs + 1, "a bump asks nothing"
        assert record._pod is None and controller.find("ns", "p0") == h.current(created)
        h.kube.mark_deleting(h.current(created))
        await settle()
        await h.clock.advance(31)
        await settle()
        assert h.kube.pod("ns", "p0") is None, "a settled pod is still deleted as asked"
        assert records(controller) == {}


def test_an_answer_is_kept_without_its_managed_fields() -> None:
    answer = realistic("p0")
    answer["metadata"].update(uid="u", resourceVersion="7", managedFields=[{"manager": "x"}])
    record = PodRecord(ref=PodRef("ns", "p0", "u"), pod=answer)
    record.settle()
    assert record.pod is not None
    assert "managedFields" not in record.pod["metadata"]
    assert "managedFields" in answer["metadata"], "the answer itself is not changed"
    assert record.pod["spec"] == answer["spec"]


def test_versions_compare_without_decoding() -> None:
    held = realistic("p0")
    held["metadata"].update(uid="u", resourceVersion="10")
    record = PodRecord(ref=PodRef("ns", "p0", "u"), pod=held)
    record.settle()
    older = {"metadata": {"resourceVersion": "9"}}
    same = {"metadata": {"resourceVersion": "10"}}  # the echo of an answer held
    newer = {"metadata": {"resourceVersion": "11"}}
    assert not record.older_than(older)
    assert not record.older_than(same)
    assert record.older_than(newer)
    assert record.older_than({"metadata": {"resourceVersion": "x"}})  # not comparable
    assert record._pod is None
    record.pod = None
    assert not record.present and record.older_than(older)


async def test_two_pods_of_one_name_are_both_found_and_each_forgotten_alone() -> None:
    """The name index keeps one UID per name (a dict per pod was 1.4 MiB at 10,000
    pods), and both while a pod replaces one of its name still held."""
    async with Harness() as h:
        controller = await h.start()
        old = PodRecord(PodRef("ns", "p0", "uid-old"), realistic("p0"))
        new = PodRecord(PodRef("ns", "p0", "uid-new"), realistic("p0"))
        controller._remember(old)
        controller._remember(new)
        controller._remember(new)  # again: still two
        assert controller._uids_named(("ns", "p0")) == ("uid-old", "uid-new")
        assert controller.find("ns", "p0", "uid-new") is not None
        controller._forget(old)
        assert controller._names[("ns", "p0")] == "uid-new"
        assert controller.find("ns", "p0") is not None
        controller._forget(new)
        assert controller.find("ns", "p0") is None and ("ns", "p0") not in controller._names
