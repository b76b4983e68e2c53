"""Readiness during a graceful termination (issue 18): the kubelet keeps probing
readiness until the container stops, so a container that stops serving when it gets
SIGTERM turns the pod NotReady while it is still shutting down (the upstream spec
"should mark readiness on pods to false while pod is in progress of terminating")."""

# ruff: noqa: F811 - pytest fixtures are imported by name and then requested as arguments
from __future__ import annotations

from typing import Any

from tests.integration.agent import Kube, wait_for
from tests.integration.process_fixtures import (  # noqa: F401 - fixtures
    StartProcessAgent,
    condition,
    process_pod,
    start_process_agent,
)

SCRIPT = """
term() { rm -f ready; sleep 30; exit 0; }
trap term TERM
touch ready
while true; do sleep 1; done
"""


def test_readiness_turns_false_while_the_pod_terminates(
    kube: Kube, start_process_agent: StartProcessAgent
) -> None:
    agent = start_process_agent()
    probe = {"exec": {"command": ["cat", "ready"]}, "periodSeconds": 1, "failureThreshold": 1}
    kube.create(
        process_pod(
            "draining",
            agent.node_name,
            SCRIPT,
            "Always",
            container={"readinessProbe": probe},
            terminationGracePeriodSeconds=30,
        )
    )
    wait_for("Ready", lambda: condition(kube.get("pod", "draining"), "Ready") == "True")
    kube.kubectl("delete", "pod", "draining", "-n", kube.namespace, "--wait=false")

    def not_ready_while_terminating() -> dict[str, Any] | None:
        pod = kube.get("pod", "draining")
        assert pod is not None, "the pod was gone before it turned NotReady"
        status = pod["status"]["containerStatuses"][0]
        if condition(pod, "Ready") == "False" and status["ready"] is False:
            return pod
        return None

    pod = wait_for("NotReady while terminating", not_ready_while_terminating, timeout=25)
    assert pod["metadata"].get("deletionTimestamp")
    assert "running" in pod["status"]["containerStatuses"][0]["state"]
