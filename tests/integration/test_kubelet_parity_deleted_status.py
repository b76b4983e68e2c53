"""A deleted pod that a finalizer keeps shows its containers terminated (issue 18:
the Lifecycle Sleep Hook specs waited for the container's terminated state, which
vkpy never wrote: it stopped the pod and deleted the object, and with a finalizer
the object stayed with its containers "running" forever). As with a kubelet, the
last status says how each container ended, with a terminal phase.
"""

# ruff: noqa: F811 - pytest fixtures are imported by name and then requested as arguments
from __future__ import annotations

import json

from tests.integration.agent import Kube, wait_for
from tests.integration.process_fixtures import (  # noqa: F401 - fixtures
    StartProcessAgent,
    phase_is,
    process_pod,
    start_process_agent,
    status_of,
)

FINALIZER = "vkpy.io/test-keep"


def test_a_deleted_pod_kept_by_a_finalizer_shows_its_containers_terminated(
    kube: Kube, start_process_agent: StartProcessAgent
) -> None:
    agent = start_process_agent()
    pod = process_pod("kept", agent.node_name, "trap 'exit 0' TERM; sleep 3600 & wait")
    pod["metadata"]["finalizers"] = [FINALIZER]
    kube.create(pod)
    try:
        wait_for("Running", lambda: phase_is(kube, "kept", "Running"), timeout=120)
        kube.kubectl("delete", "pod", "kept", "-n", kube.namespace, "--wait=false")

        def ended() -> dict[str, object] | None:
            found = kube.get("pod", "kept")
            terminated = status_of(found).get("state", {}).get("terminated")
            return found if terminated else None

        found = wait_for("the container's terminated state", ended, timeout=120)
        terminated = status_of(found)["state"]["terminated"]
        assert terminated["exitCode"] == 0, terminated
        assert terminated["finishedAt"], terminated
        assert found["status"]["phase"] == "Succeeded", found["status"]
        assert found["metadata"]["deletionTimestamp"]
    finally:
        kube.kubectl(
            "patch", "pod", "kept", "-n", kube.namespace, "--type=merge",
            "-p", json.dumps({"metadata": {"finalizers": None}}), check=False,
        )  # fmt: skip
