"""What the kubelet tells a user about pods it will not or cannot run (issue 18).

Pod admission (the node's OS, sysctls) rejects a pod as the kubelet does: Failed with
the check's reason, `Pod was rejected: ...` and a Warning Event. A container that
cannot start gets the kubelet's `Failed` Warning Event (`Error: ...`), and `kubectl
logs` of a container that never started answers in the kubelet's words.
"""

# ruff: noqa: F811 - pytest fixtures are imported by name and then requested as arguments
from __future__ import annotations

from typing import Any

from tests.integration.agent import Kube, wait_for
from tests.integration.process_fixtures import (  # noqa: F401 - fixtures
    StartProcessAgent,
    phase_is,
    process_pod,
    start_process_agent,
)


def _event(kube: Kube, pod: str, reason: str) -> dict[str, Any] | None:
    return next(
        (e for e in kube.events(pod) if e["reason"] == reason and e["type"] == "Warning"), None
    )


def _sysctls(*names: str) -> dict[str, Any]:
    return {"sysctls": [{"name": name, "value": "1"} for name in names]}


def test_pods_for_another_os_or_with_forbidden_sysctls_are_rejected(
    kube: Kube, start_process_agent: StartProcessAgent
) -> None:
    agent = start_process_agent(args=["--allowed-unsafe-sysctls", "kernel.msg*"])
    node = agent.node_name
    kube.create(process_pod("windows", node, "sleep 3600", os={"name": "windows"}))
    kube.create(process_pod("unsafe", node, "sleep 3600", securityContext=_sysctls("kernel.sem")))
    kube.create(
        process_pod(
            "allowed",
            node,
            "sleep 3600",
            securityContext=_sysctls("kernel.msgmax", "kernel.shm_rmid_forced"),
        )
    )

    windows = wait_for("windows Failed", lambda: phase_is(kube, "windows", "Failed"))
    assert windows["status"]["reason"] == "PodOSNotSupported"
    assert windows["status"]["message"] == (
        "Pod was rejected: Failed to admit pod as the OS field doesn't match node OS"
    )
    wait_for("PodOSNotSupported Event", lambda: _event(kube, "windows", "PodOSNotSupported"))

    unsafe = wait_for("unsafe Failed", lambda: phase_is(kube, "unsafe", "Failed"))
    assert unsafe["status"]["reason"] == "SysctlForbidden"
    assert unsafe["status"]["message"] == (
        'Pod was rejected: forbidden sysctl: "kernel.sem" not allowlisted'
    )
    event = wait_for("SysctlForbidden Event", lambda: _event(kube, "unsafe", "SysctlForbidden"))
    assert event["message"] == 'forbidden sysctl: "kernel.sem" not allowlisted'

    wait_for("allowed Running", lambda: phase_is(kube, "allowed", "Running"))


def test_containers_that_cannot_start_get_a_failed_event_and_logs_say_why(
    kube: Kube, start_process_agent: StartProcessAgent
) -> None:
    agent = start_process_agent()
    node = agent.node_name
    kube.create(process_pod("missing", node, "", container={"command": ["no-such-cmd"]}))
    image_only = process_pod("imageonly", node, "", container={"image": "example.com/team/app:1"})
    del image_only["spec"]["containers"][0]["command"]
    kube.create(image_only)
    blocked = [{"name": "fails", "image": "busybox:1.36", "command": ["sh", "-c", "exit 2"]}]
    kube.create(process_pod("blocked", node, "sleep 3600", "Always", initContainers=blocked))

    event = wait_for("Failed Event", lambda: _event(kube, "missing", "Failed"))
    assert event["message"].startswith("Error: ")
    assert "no-such-cmd" in event["message"]
    assert event["involvedObject"]["fieldPath"] == "spec.containers{app}"
    event = wait_for("Failed Event", lambda: _event(kube, "imageonly", "Failed"))
    assert event["message"].startswith("Error: ")
    assert "has no command" in event["message"]

    logs = kube.cluster.run_kubectl("logs", "-n", kube.namespace, "imageonly", check=False)
    assert logs.returncode != 0
    assert (
        'container "app" in pod "imageonly" is waiting to start: CreateContainerError'
        in logs.stderr
    )
    wait_for("blocked Pending", lambda: phase_is(kube, "blocked", "Pending"))
    logs = kube.cluster.run_kubectl(
        "logs", "-n", kube.namespace, "blocked", "-c", "app", check=False
    )
    assert 'container "app" in pod "blocked" is waiting to start: PodInitializing' in logs.stderr
