"""Initialized, ContainersReady and Ready as the kubelet words them, and init
container statuses as it reports them (ready once completed; waiting containers
behind init containers with PodInitializing)."""

from datetime import UTC, datetime
from typing import Any

from vkpy.node.pods.pod_status import StatusContext, desired_status
from vkpy.providers.base import ContainerState, PodState

NOW = datetime(2026, 12, 1, 10, 0, 0, tzinfo=UTC)
CTX = StatusContext(host_ip="10.1.2.3", now=NOW)


def pod(inits: list[dict[str, Any]], **spec: Any) -> dict[str, Any]:
    return {
        "metadata": {"name": "p", "namespace": "ns", "uid": "u1"},
        "spec": {
            "initContainers": inits,
            "containers": [{"name": "run1", "image": "busybox"}],
            **spec,
        },
        "status": {},
    }


INITS = [{"name": "init1", "image": "busybox"}, {"name": "init2", "image": "busybox"}]


def done(name: str, code: int = 0) -> ContainerState:
    return ContainerState(
        name=name,
        state="terminated",
        exit_code=code,
        reason="Completed" if code == 0 else "Error",
        finished_at=NOW,
    )


def conditions(status: dict[str, Any]) -> dict[str, tuple[str, str | None, str | None]]:
    return {
        c["type"]: (c["status"], c.get("reason"), c.get("message")) for c in status["conditions"]
    }


def test_completed_init_containers_are_ready_and_the_pod_initialized() -> None:
    state = PodState(
        phase="Running",
        init_containers=(done("init1"), done("init2")),
        containers=(ContainerState(name="run1", state="running", started_at=NOW, ready=True),),
    )
    status = desired_status(pod(INITS), state, CTX)
    assert [s["ready"] for s in status["initContainerStatuses"]] == [True, True]
    assert [s["started"] for s in status["initContainerStatuses"]] == [False, False]
    assert conditions(status)["Initialized"] == ("True", None, None)
    assert conditions(status)["Ready"] == ("True", None, None)


def test_a_failing_first_init_container_leaves_both_incomplete() -> None:
    state = PodState(
        phase="Pending",
        init_containers=(
            ContainerState(
                name="init1",
                state="waiting",
                reason="CrashLoopBackOff",
                restart_count=2,
                last_terminated=done("init1", 1),
            ),
        ),
    )
    status = desired_status(pod(INITS), state, CTX)
    init1, init2 = status["initContainerStatuses"]
    assert init1["ready"] is False
    assert init2["state"] == {"waiting": {"reason": "PodInitializing"}}
    assert status["containerStatuses"][0]["state"] == {"waiting": {"reason": "PodInitializing"}}
    found = conditions(status)
    assert found["Initialized"] == (
        "False",
        "ContainersNotInitialized",
        "containers with incomplete status: [init1 init2]",
    )
    assert found["ContainersReady"] == (
        "False",
        "ContainersNotReady",
        "containers with unready status: [run1]",
    )
    assert found["Ready"] == found["ContainersReady"]


def test_a_failed_init_container_of_a_never_pod() -> None:
    state = PodState(phase="Failed", init_containers=(done("init1"), done("init2", 1)))
    status = desired_status(pod(INITS, restartPolicy="Never"), state, CTX)
    assert [s["ready"] for s in status["initContainerStatuses"]] == [True, False]
    assert status["containerStatuses"][0]["state"] == {"waiting": {"reason": "PodInitializing"}}
    found = conditions(status)
    assert found["Initialized"] == (
        "False",
        "ContainersNotInitialized",
        "containers with incomplete status: [init2]",
    )
    assert found["ContainersReady"] == ("False", "PodFailed", None)
    assert found["PodReadyToStartContainers"][0] == "False"


def test_succeeded_pod_is_pod_completed() -> None:
    state = PodState(
        phase="Succeeded",
        init_containers=(done("init1"), done("init2")),
        containers=(done("run1"),),
    )
    found = conditions(desired_status(pod(INITS), state, CTX))
    assert found["Initialized"] == ("True", "PodCompleted", None)
    assert found["ContainersReady"] == ("False", "PodCompleted", None)
    assert found["Ready"] == ("False", "PodCompleted", None)


def test_a_sidecar_counts_once_started_and_must_be_ready() -> None:
    inits = [{"name": "side", "image": "busybox", "restartPolicy": "Always"}]
    state = PodState(
        phase="Running",
        init_containers=(ContainerState(name="side", state="running", started=True, ready=False),),
        containers=(ContainerState(name="run1", state="running", ready=True),),
    )
    status = desired_status(pod(inits), state, CTX)
    assert status["initContainerStatuses"][0]["ready"] is False
    found = conditions(status)
    assert found["Initialized"] == ("True", None, None)
    assert found["ContainersReady"] == (
        "False",
        "ContainersNotReady",
        "containers with unready status: [side]",
    )


def test_readiness_gates_in_the_kubelets_words() -> None:
    spec = pod([], readinessGates=[{"conditionType": "example.com/lb"}])
    state = PodState(
        phase="Running", containers=(ContainerState(name="run1", state="running", ready=True),)
    )
    found = conditions(desired_status(spec, state, CTX))
    assert found["ContainersReady"] == ("True", None, None)
    assert found["Ready"] == (
        "False",
        "ReadinessGatesNotReady",
        'corresponding condition of pod readiness gate "example.com/lb" does not exist.',
    )
    spec["status"] = {"conditions": [{"type": "example.com/lb", "status": "False"}]}
    found = conditions(desired_status(spec, state, CTX))
    assert found["Ready"][2] == (
        'the status of pod readiness gate "example.com/lb" is not "True", but False'
    )
