"""A Deployment whose pods cannot start keeps exactly its replicas, all Pending with
a reason, however long it waits (issue 31, deliverable 5).

Before, the process backend failed a pod whose `runAsUser` is outside the node's
pod id range (the chart's default 10001), its ReplicaSet replaced it at once, and
3,150 Failed pods piled up in 5 minutes. The kubelet fails a pod only at admission;
a container it cannot start leaves the pod Pending, Waiting with
CreateContainerConfigError, tried again with back-off. Real control plane (the
scheduler and the ReplicaSet controller), real process backend as root.
"""

# ruff: noqa: F811 - pytest fixtures are imported by name and then requested as arguments
from __future__ import annotations

import time
from typing import Any

from tests.integration.agent import Kube, wait_for
from tests.integration.cannot_start import waiting_reason
from tests.integration.process_fixtures import (  # noqa: F401 - fixtures
    StartProcessAgent,
    process_pod,
    start_process_agent,
)

REPLICAS = 3
WATCHED = 60.0


def deployment(node: str) -> dict[str, Any]:
    template = process_pod("x", node, "sleep 3600", restart_policy="Always")["spec"]
    del template["nodeName"]  # placed by the real scheduler, as a user's Deployment is
    template["nodeSelector"] = {"kubernetes.io/hostname": node}
    template["securityContext"] = {"runAsUser": 10001, "runAsGroup": 10001, "fsGroup": 10001}
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "storm"},
        "spec": {
            "replicas": REPLICAS,
            "selector": {"matchLabels": {"app": "storm"}},
            "template": {"metadata": {"labels": {"app": "storm"}}, "spec": template},
        },
    }


def test_a_deployment_whose_pods_cannot_start_keeps_its_replicas_pending(
    kube: Kube, start_process_agent: StartProcessAgent
) -> None:
    agent = start_process_agent()
    kube.apply(deployment(agent.node_name))

    def all_waiting() -> list[dict[str, Any]] | None:
        pods = kube.list("pods", "app=storm")
        if len(pods) == REPLICAS and all(waiting_reason(p) for p in pods):
            return pods
        return None

    first = wait_for("3 pods Pending with a reason", all_waiting, timeout=90)
    names = {p["metadata"]["name"] for p in first}
    seen: set[str] = set(names)
    samples = 0
    end = time.monotonic() + WATCHED
    while time.monotonic() < end:
        pods = kube.list("pods", "app=storm")
        seen |= {p["metadata"]["name"] for p in pods}
        phases = [p["status"].get("phase") for p in pods]
        assert "Failed" not in phases, phases
        assert len(pods) == REPLICAS, [p["metadata"]["name"] for p in pods]
        for pod in pods:
            reason = waiting_reason(pod)
            assert reason is not None, pod["status"]
            assert reason[0] == "CreateContainerConfigError", reason
            assert "runAsUser 10001 is outside this node's pod id range" in reason[1], reason
        samples += 1
        time.sleep(2)
    assert samples >= 20
    assert seen == names  # no pod replaced: no storm
    for name in names:
        failed = [e for e in kube.events(name) if e["reason"] == "Failed"]
        assert len(failed) == 1, failed  # folded by the recorder
        assert failed[0]["type"] == "Warning"
        assert "runAsUser 10001" in failed[0]["message"]
        assert failed[0]["count"] >= 3  # tried again, with back-off
    replica_sets = kube.list("replicasets", "app=storm")
    assert len(replica_sets) == 1
    assert replica_sets[0]["status"]["replicas"] == REPLICAS
