"""What the kubelet reports for a pod whose containers vanished from under it.

When the container runtime no longer knows a pod's containers, the kubelet marks
each one terminated with reason ContainerStatusUnknown and exit code 137; with
restartPolicy Never the pod is then Failed, so its owner (a Job) makes a
replacement instead of the pod silently running twice. Pure functions.
"""

from __future__ import annotations

from vkpy.core.objects import KubeObject, containers_of, status
from vkpy.providers.base import ContainerState, PodState

LOST_REASON = "ContainerStatusUnknown"
LOST_MESSAGE = "The container could not be located when the pod was terminated"


def lost_state(pod: KubeObject) -> PodState:
    """The pod, Failed, with every container terminated as unknown."""
    restarts = {
        str(c.get("name")): int(c.get("restartCount") or 0)
        for c in status(pod).get("containerStatuses") or []
    }
    return PodState(
        phase="Failed",
        reason=LOST_REASON,
        message="The backend no longer has the pod",
        containers=tuple(
            ContainerState(
                name=str(c.get("name")),
                state="terminated",
                reason=LOST_REASON,
                message=LOST_MESSAGE,
                exit_code=137,
                restart_count=restarts.get(str(c.get("name")), 0),
                image=str(c.get("image") or ""),
            )
            for c in containers_of(pod)
        ),
        pod_ip=status(pod).get("podIP"),
    )
