"""The kubelet-owned pod status and the minimal patch that writes it."""

from datetime import UTC, datetime

from vkpy.node.pods.pod_status import StatusContext, desired_status, status_patch
from vkpy.providers.base import ContainerState, PodState

NOW = datetime(2026, 11, 30, 12, 0, 0, tzinfo=UTC)
CTX = StatusContext(host_ip="10.1.2.3", now=NOW)


def pod(**status: object) -> dict[str, object]:
    return {
        "metadata": {"name": "p", "namespace": "ns", "uid": "u1"},
        "spec": {"containers": [{"name": "app", "image": "busybox"}]},
        "status": status,
    }


def running() -> PodState:
    return PodState(
        phase="Running",
        containers=(ContainerState(name="app", state="running", started_at=NOW, ready=True),),
        started_at=NOW,
    )


def test_running_pod_is_ready_with_ips_and_container_status() -> None:
    status = desired_status(pod(), running(), CTX)
    assert status["phase"] == "Running"
    assert status["podIP"] == "10.1.2.3"
    assert status["hostIP"] == "10.1.2.3"
    conditions = {c["type"]: c["status"] for c in status["conditions"]}
    assert conditions == {
        "PodReadyToStartContainers": "True",
        "Initialized": "True",
        "ContainersReady": "True",
        "Ready": "True",
        "PodScheduled": "True",
    }
    (container,) = status["containerStatuses"]
    assert container["state"] == {"running": {"startedAt": "2026-11-30T12:00:00Z"}}
    assert container["ready"] is True
    assert container["image"] == "busybox"


def test_failed_container_reports_exit_code_and_pod_failed() -> None:
    state = PodState(
        phase="Failed",
        containers=(
            ContainerState(
                name="app", state="terminated", exit_code=3, reason="Error", finished_at=NOW
            ),
        ),
    )
    status = desired_status(pod(), state, CTX)
    terminated = status["containerStatuses"][0]["state"]["terminated"]
    assert terminated["exitCode"] == 3
    assert terminated["reason"] == "Error"
    ready = next(c for c in status["conditions"] if c["type"] == "Ready")
    assert ready["status"] == "False"
    assert ready["reason"] == "PodFailed"  # the kubelet's word for a Failed pod


def test_no_patch_when_nothing_changed() -> None:
    first = desired_status(pod(), running(), CTX)
    later = StatusContext(host_ip="10.1.2.3", now=NOW.replace(hour=13))
    again = desired_status(pod(**first), running(), later)
    assert status_patch(pod(**first), again) is None


def test_patch_carries_uid_and_only_changed_conditions() -> None:
    first = desired_status(pod(), running(), CTX)
    crashed = PodState(
        phase="Running",
        containers=(
            ContainerState(name="app", state="waiting", reason="CrashLoopBackOff", restart_count=1),
        ),
    )
    desired = desired_status(pod(**first), crashed, CTX)
    patch = status_patch(pod(**first), desired)
    assert patch is not None
    assert patch["metadata"] == {"uid": "u1"}
    changed = {c["type"] for c in patch["status"]["conditions"]}
    assert changed == {"ContainersReady", "Ready"}
    assert "phase" not in patch["status"]


def test_conditions_written_by_others_are_kept_out_of_the_patch() -> None:
    first = desired_status(pod(), running(), CTX)
    first["conditions"].append({"type": "example.com/Gate", "status": "True"})
    desired = desired_status(pod(**first), running(), CTX)
    assert all(c["type"] != "example.com/Gate" for c in desired["conditions"])
    assert status_patch(pod(**first), desired) is None


def test_readiness_gate_holds_ready_false() -> None:
    gated = pod()
    gated["spec"]["readinessGates"] = [{"conditionType": "example.com/Gate"}]  # type: ignore[index]
    status = desired_status(gated, running(), CTX)
    ready = next(c for c in status["conditions"] if c["type"] == "Ready")
    assert ready["status"] == "False"
    assert ready["reason"] == "ReadinessGatesNotReady"


def test_transition_time_kept_while_status_unchanged() -> None:
    first = desired_status(pod(), running(), CTX)
    later = StatusContext(host_ip="10.1.2.3", now=NOW.replace(hour=14))
    again = desired_status(pod(**first), running(), later)
    before = {c["type"]: c["lastTransitionTime"] for c in first["conditions"]}
    after = {c["type"]: c["lastTransitionTime"] for c in again["conditions"]}
    assert before == after


def test_a_new_pod_ip_replaces_the_old_one() -> None:
    first = desired_status(pod(), running(), CTX)
    moved = PodState(
        phase="Running",
        containers=running().containers,
        pod_ip="10.9.9.9",
    )
    patch = status_patch(pod(**first), desired_status(pod(**first), moved, CTX))
    assert patch is not None
    assert patch["status"]["podIP"] == "10.9.9.9"
    assert patch["status"]["podIPs"] == [{"ip": "10.9.9.9"}, {"$patch": "replace"}]
    assert "hostIPs" not in patch["status"]


def test_an_evicted_pod_is_a_disruption_target_as_the_kubelets_evictions_are() -> None:
    evicted = PodState(
        phase="Failed",
        reason="Evicted",
        message="The Spot container group was evicted",
        containers=(
            ContainerState(name="app", state="terminated", exit_code=137, reason="Evicted"),
        ),
    )
    status = desired_status(pod(), evicted, CTX)
    target = next(c for c in status["conditions"] if c["type"] == "DisruptionTarget")
    assert (target["status"], target["reason"]) == ("True", "TerminationByKubelet")
    assert target["message"] == "The Spot container group was evicted"
    patch = status_patch(pod(phase="Running"), status)
    assert patch is not None
    assert "DisruptionTarget" in {c["type"] for c in patch["status"]["conditions"]}
    failed = desired_status(pod(), PodState(phase="Failed", reason="Error"), CTX)
    assert "DisruptionTarget" not in {c["type"] for c in failed["conditions"]}
