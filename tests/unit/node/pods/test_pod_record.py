"""Which watched updates of a pod ask anything of the kubelet: a change of spec or
metadata (pod_record.asks_kubelet), or a status that no longer says what vkpy
decided (pod_reporting.is_echo); pod_controller.needs_sync asks both."""

from __future__ import annotations

import copy
from typing import Any

from vkpy.node.pods.pod_controller import needs_sync
from vkpy.node.pods.pod_record import (
    Absent,
    Created,
    Final,
    PodRecord,
    Stopping,
    asks_kubelet,
)
from vkpy.node.pods.pod_reporting import is_echo
from vkpy.providers.base import PodRef, PodState

DESIRED = {
    "phase": "Running",
    "conditions": [{"type": "Ready", "status": "True"}],
}


def obj(rv: str, **status: Any) -> dict[str, Any]:
    return {
        "metadata": {"name": "p", "namespace": "ns", "uid": "u", "resourceVersion": rv},
        "spec": {"containers": [{"name": "c", "image": "i:1"}]},
        "status": {**copy.deepcopy(DESIRED), **status},
    }


def record(pod: dict[str, Any] | None, desired: dict[str, Any] | None = DESIRED) -> PodRecord:
    return PodRecord(ref=PodRef("ns", "p", "u"), pod=pod, reported=desired)


def test_our_echo_and_version_bumps_ask_nothing() -> None:
    assert not needs_sync(record(obj("1")), obj("2"))
    bumped = obj("3")
    bumped["metadata"]["managedFields"] = [{"manager": "vkpy"}]
    assert not needs_sync(record(obj("1")), bumped)


def test_status_changed_by_someone_else_asks_for_a_correction() -> None:
    not_ready = obj("2", conditions=[{"type": "Ready", "status": "False"}])
    assert needs_sync(record(obj("1")), not_ready)
    assert not asks_kubelet(obj("1"), not_ready)  # only the status says so
    assert not is_echo(record(obj("1")), not_ready)


def test_spec_metadata_and_readiness_gates_ask_for_a_sync() -> None:
    changed = obj("2")
    changed["spec"]["containers"][0]["image"] = "i:2"
    assert needs_sync(record(obj("1")), changed)
    deleting = obj("2")
    deleting["metadata"]["deletionTimestamp"] = "2027-01-01T00:00:00Z"
    assert needs_sync(record(obj("1")), deleting)
    gated = obj("2", conditions=[*DESIRED["conditions"], {"type": "x/gate", "status": "True"}])
    assert needs_sync(record(obj("1")), gated)


def test_a_pod_never_decided_on_always_syncs() -> None:
    assert needs_sync(record(obj("1"), desired=None), obj("2"))
    assert needs_sync(record(None), obj("2"))


def test_only_created_and_stopping_pods_are_in_the_backend() -> None:
    stages = [Absent(), Created(), Stopping(), Final(PodState(phase="Failed"))]
    held = [PodRecord(ref=PodRef("ns", "p", "u"), pod=None, stage=s).in_backend for s in stages]
    assert held == [False, True, True, False]
