"""The kubelet side of ephemeral containers: status written for them, and on a backend
that cannot run them, a terminated status with the reason and a Warning Event (so
`kubectl debug` ends instead of waiting forever)."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import cast

from vkpy.core.objects import KubeObject
from vkpy.kube.events import EventRecorder, InvolvedObject
from vkpy.node.pods.pod_status import StatusContext, desired_status, status_patch
from vkpy.node.podspec.ephemeral import EphemeralContainers
from vkpy.providers.base import ContainerState, PodRef, PodState
from vkpy.providers.sim import SimConfig, SimProvider

NOW = datetime(2026, 12, 1, 5, 0, 0, tzinfo=UTC)
REF = PodRef("ns", "p", "u1")


def pod(*ephemeral: str) -> KubeObject:
    return {
        "metadata": {"name": "p", "namespace": "ns", "uid": "u1"},
        "spec": {
            "containers": [{"name": "app", "image": "busybox"}],
            "ephemeralContainers": [
                {"name": n, "image": "busybox", "targetContainerName": "app"} for n in ephemeral
            ],
        },
        "status": {},
    }


class Recorded:
    def __init__(self) -> None:
        self.events: list[tuple[InvolvedObject, str, str, str]] = []

    def emit(self, involved: InvolvedObject, event_type: str, reason: str, message: str) -> None:
        self.events.append((involved, event_type, reason, message))


class NoObjects:
    async def get_config_map(self, namespace: str, name: str) -> KubeObject | None:
        return None

    async def get_secret(self, namespace: str, name: str) -> KubeObject | None:
        return None

    async def list_services(self, namespace: str) -> list[KubeObject]:
        return []


def running(*ephemeral: ContainerState) -> PodState:
    app = ContainerState(name="app", state="running", started_at=NOW, ready=True)
    return PodState(phase="Running", containers=(app,), ephemeral_containers=ephemeral)


def test_ephemeral_container_statuses_are_written() -> None:
    ctx = StatusContext(host_ip="10.0.0.1", now=NOW)
    debug = ContainerState(name="dbg", state="running", started_at=NOW)
    status = desired_status(pod("dbg", "later"), running(debug), ctx)
    dbg, later = status["ephemeralContainerStatuses"]
    assert dbg["name"] == "dbg" and dbg["state"] == {
        "running": {"startedAt": "2026-12-01T05:00:00Z"}
    }
    assert later["state"] == {"waiting": {"reason": "ContainerCreating"}}
    patch = status_patch(pod("dbg", "later"), status)
    assert patch is not None and len(patch["status"]["ephemeralContainerStatuses"]) == 2
    assert "ephemeralContainerStatuses" not in desired_status(pod(), running(), ctx)


async def test_a_backend_that_cannot_run_them_reports_why() -> None:
    recorded = Recorded()
    ephemeral = EphemeralContainers(
        SimProvider(SimConfig()), cast(EventRecorder, recorded), NoObjects(), "10.0.0.1"
    )
    await ephemeral.sync(pod("dbg"), REF)
    await ephemeral.sync(pod("dbg"), REF)  # once only
    (event,) = recorded.events
    involved, kind, reason, message = event
    assert involved.field_path == "spec.ephemeralContainers{dbg}" and involved.uid == "u1"
    assert (kind, reason) == ("Warning", "Failed")
    assert message == "Error: the sim backend cannot run ephemeral containers"
    state = ephemeral.status(pod("dbg"), REF, running())
    (dbg,) = state.ephemeral_containers
    assert (dbg.state, dbg.reason, dbg.exit_code) == ("terminated", "ContainerCannotRun", 128)
    assert dbg.message == "the sim backend cannot run ephemeral containers"
    ctx = StatusContext(host_ip="10.0.0.1", now=NOW)
    (written,) = desired_status(pod("dbg"), state, ctx)["ephemeralContainerStatuses"]
    assert written["state"]["terminated"]["reason"] == "ContainerCannotRun"
    ephemeral.forget(REF.uid)
    assert ephemeral.status(pod("dbg"), REF, running()).ephemeral_containers == ()
