"""activeDeadlineSeconds: when a pod has run too long, and what it looks like after.

The kubelet fails a pod that stays active past `spec.activeDeadlineSeconds` (counted
from `status.startTime`): its containers are killed and the pod is Failed with reason
DeadlineExceeded. These pure functions decide and describe that; the pod controller
does the stopping.
"""

from __future__ import annotations

from datetime import datetime

from vkpy.core.objects import KubeObject, spec, status
from vkpy.core.rfc3339 import parse_or_none
from vkpy.node.pods.pod_status import TERMINAL_PHASES
from vkpy.providers.base import ContainerState, PodState

DEADLINE_MESSAGE = "Pod was active on the node longer than the specified deadline"


def deadline_at(pod: KubeObject) -> float | None:
    """When (epoch seconds) the pod's active deadline passes, if it has one."""
    deadline = spec(pod).get("activeDeadlineSeconds")
    if deadline is None:  # most pods: no time to parse (it showed in a burst's profile)
        return None
    started = parse_or_none(status(pod).get("startTime"))
    if started is None:
        return None
    return started.timestamp() + float(deadline)


def deadline_exceeded(pod: KubeObject, state: PodState, now: float) -> bool:
    at = deadline_at(pod)
    return at is not None and state.phase not in TERMINAL_PHASES and now >= at


def deadline_state(state: PodState, now: datetime) -> PodState:
    """The pod after the kubelet killed it for its deadline."""
    return PodState(
        phase="Failed",
        reason="DeadlineExceeded",
        message=DEADLINE_MESSAGE,
        init_containers=state.init_containers,
        containers=tuple(_killed(c, now) for c in state.containers),
        started_at=state.started_at,
        pod_ip=state.pod_ip,
    )


def _killed(container: ContainerState, now: datetime) -> ContainerState:
    if container.state == "terminated":
        return container
    return ContainerState(
        name=container.name,
        state="terminated",
        reason="Error",
        exit_code=137,
        started_at=container.started_at,
        finished_at=now,
        restart_count=container.restart_count,
        image=container.image,
        container_id=container.container_id,
    )
