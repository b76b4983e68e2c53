"""What an ECS task's state means for its pod: the pure mapping to `PodState`.

ECS moves a task through PROVISIONING, PENDING and ACTIVATING (the pod is Pending,
its containers ContainerCreating), RUNNING (Running), then DEACTIVATING, STOPPING
and DEPROVISIONING to STOPPED. A stopped task's containers carry exit codes: all
app containers 0 means Succeeded, anything else Failed, with the task's
stoppedReason as the message. When the pod's restartPolicy re-runs the task, the
pod stays Running and shows the restart like the kubelet does (CrashLoopBackOff
while waiting, restart count, last state). The pod IP is the task's ENI address.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime

from vkpy.providers.aws.clients import AwsObject
from vkpy.providers.base import ContainerState, PodPhase, PodState

PENDING = frozenset({"PROVISIONING", "PENDING", "ACTIVATING"})
STOPPED = "STOPPED"
FAILED_TO_START = "TaskFailedToStart"


@dataclass(frozen=True)
class TaskShape:
    """What vkpy knows of a pod's containers (from its task definition)."""

    app: tuple[str, ...]
    init: tuple[str, ...] = ()
    images: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class Restart:
    """A stopped run that will be (or was) followed by another."""

    count: int = 0
    """Runs before the current one."""
    last: Mapping[str, ContainerState] = field(default_factory=dict)
    """Each container's end in the previous run."""
    waiting: float | None = None
    """Seconds of back-off before the next run, while waiting for it."""


def _time(value: object) -> datetime | None:
    return value if isinstance(value, datetime) else None


def pod_ip(task: AwsObject) -> str | None:
    for attachment in task.get("attachments") or []:
        if attachment.get("type") != "ElasticNetworkInterface":
            continue
        for detail in attachment.get("details") or []:
            if detail.get("name") == "privateIPv4Address" and detail.get("value"):
                return str(detail["value"])
    return None


def _containers(task: AwsObject) -> dict[str, AwsObject]:
    return {str(c.get("name")): c for c in task.get("containers") or []}


def terminated(task: AwsObject, name: str, image: str) -> ContainerState:
    """How container `name` ended in a stopped task."""
    container = _containers(task).get(name) or {}
    code = container.get("exitCode")
    stop_code = task.get("stopCode")
    if code is None:
        exit_code = 128 if stop_code == FAILED_TO_START else 137
        reason = "ContainerCannotRun" if stop_code == FAILED_TO_START else "Error"
    else:
        exit_code = int(code)
        reason = "Completed" if exit_code == 0 else "Error"
    message = container.get("reason") or task.get("stoppedReason") or None
    return ContainerState(
        name=name,
        state="terminated",
        reason=reason,
        message=str(message) if message else None,
        exit_code=exit_code,
        started_at=_time(task.get("startedAt")),
        finished_at=_time(task.get("stoppedAt")) or _time(task.get("executionStoppedAt")),
        image=image,
        image_id=str(container.get("imageDigest") or ""),
        container_id=f"ecs://{container.get('runtimeId') or task.get('taskArn', '')}/{name}",
    )


def succeeded(task: AwsObject, shape: TaskShape) -> bool:
    """Whether a stopped task's app (and init) containers all exited 0."""
    names = (*shape.init, *shape.app)
    return all(terminated(task, n, "").exit_code == 0 for n in names)


def _running(task: AwsObject, name: str, image: str, restart: Restart) -> ContainerState:
    container = _containers(task).get(name) or {}
    if container.get("lastStatus") == STOPPED:
        ended = terminated(task, name, image)
        return replace(ended, restart_count=restart.count)
    health = container.get("healthStatus")
    return ContainerState(
        name=name,
        state="running",
        started_at=_time(task.get("startedAt")) or _time(task.get("createdAt")),
        ready=health != "UNHEALTHY",
        started=True,
        restart_count=restart.count,
        last_terminated=restart.last.get(name),
        image=image,
        image_id=str(container.get("imageDigest") or ""),
        container_id=f"ecs://{container.get('runtimeId') or task.get('taskArn', '')}/{name}",
    )


def _init_done(task: AwsObject, name: str, image: str) -> ContainerState:
    container = _containers(task).get(name) or {}
    if container.get("exitCode") is not None or container.get("lastStatus") == STOPPED:
        return terminated(task, name, image)
    return ContainerState(
        name=name,
        state="terminated",
        reason="Completed",
        exit_code=0,
        started_at=_time(task.get("startedAt")),
        finished_at=_time(task.get("startedAt")),
        image=image,
    )


def _waiting(
    names: Sequence[str], shape: TaskShape, reason: str, message: str | None
) -> tuple[ContainerState, ...]:
    return tuple(
        ContainerState(
            name=n, state="waiting", reason=reason, message=message, image=shape.images.get(n, "")
        )
        for n in names
    )


def pod_state(
    task: AwsObject,
    shape: TaskShape,
    restart: Restart | None = None,
    note: str | None = None,
) -> PodState:
    """The pod's state from a DescribeTasks entry of its current task."""
    restart = restart or Restart()
    status = str(task.get("lastStatus") or "PROVISIONING")
    created = _time(task.get("createdAt"))
    ip = pod_ip(task)
    images = shape.images
    if status in PENDING:
        return PodState(
            phase="Pending",
            message=note,
            started_at=created,
            pod_ip=ip,
            init_containers=_waiting(shape.init, shape, "PodInitializing", None),
            containers=tuple(
                ContainerState(
                    name=n,
                    state="waiting",
                    reason="ContainerCreating",
                    message=f"task {status.lower()}",
                    restart_count=restart.count,
                    last_terminated=restart.last.get(n),
                    image=images.get(n, ""),
                )
                for n in shape.app
            ),
        )
    inits = tuple(_init_done(task, n, images.get(n, "")) for n in shape.init)
    if status != STOPPED:
        return PodState(
            phase="Running",
            message=note,
            started_at=created,
            pod_ip=ip,
            init_containers=inits,
            containers=tuple(_running(task, n, images.get(n, ""), restart) for n in shape.app),
        )
    ended = {n: terminated(task, n, images.get(n, "")) for n in shape.app}
    if restart.waiting is not None:
        return PodState(
            phase="Running",
            message=note,
            started_at=created,
            pod_ip=ip,
            init_containers=inits,
            containers=tuple(
                ContainerState(
                    name=n,
                    state="waiting",
                    reason="CrashLoopBackOff",
                    message=f"back-off {restart.waiting:g}s restarting failed container={n}",
                    restart_count=restart.count,
                    last_terminated=ended[n],
                    image=images.get(n, ""),
                )
                for n in shape.app
            ),
        )
    phase: PodPhase = "Succeeded" if succeeded(task, shape) else "Failed"
    reason = FAILED_TO_START if task.get("stopCode") == FAILED_TO_START else None
    messages = [m for m in (task.get("stoppedReason"), note) if m]
    return PodState(
        phase=phase,
        reason=reason,
        message="; ".join(str(m) for m in messages) or None,
        started_at=created,
        pod_ip=ip,
        init_containers=tuple(terminated(task, n, images.get(n, "")) for n in shape.init),
        containers=tuple(replace(ended[n], restart_count=restart.count) for n in shape.app),
    )
