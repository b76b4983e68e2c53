"""A container group's provisioning state and instance view as the pod's state.

ACI reports a group in two layers: the deployment (provisioningState: Pending,
Creating, Succeeded, Failed, ...) and, once deployed, the instance view (the group's
state, each container's current and previous state, restart count and events).
This module turns both into a `PodState`: Pending with ContainerCreating (or the
platform's pull error) while deploying, Running/Succeeded/Failed from the containers,
CrashLoopBackOff while a container waits to be restarted, and Failed with reason
Evicted when the platform took a Spot group's capacity back.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime

from azure.mgmt.containerinstance import models as m

from vkpy.providers.base import ContainerState, PodPhase, PodState

EVICTION_EVENTS = ("SpotContainerGroupEvicted", "Evicted", "SpotEviction")
DEPLOYING = ("Pending", "Creating", "Accepted", "Updating", "Repairing", "Unhealthy")


def _aware(value: datetime | None) -> datetime | None:
    if value is None:
        return None
    return value if value.tzinfo else value.replace(tzinfo=UTC)


def _terminated(name: str, state: m.ContainerState, restarts: int = 0) -> ContainerState:
    code = state.exit_code if state.exit_code is not None else 0
    reason = "Completed" if code == 0 else (state.detail_status or "Error")
    return ContainerState(
        name=name,
        state="terminated",
        reason=reason,
        exit_code=code,
        started_at=_aware(state.start_time),
        finished_at=_aware(state.finish_time),
        restart_count=restarts,
    )


def _last_event(events: Sequence[m.Event] | None, type_: str = "Warning") -> str | None:
    messages = [e.message for e in events or [] if e.type == type_ and e.message]
    return messages[-1] if messages else None


def container_state(
    container: m.Container | m.InitContainerDefinition,
    restart_policy: str,
    stopped: bool,
    ready: bool = True,
) -> ContainerState:
    """One container as Kubernetes reports it."""
    name = str(container.name)
    view = container.instance_view
    if view is None or view.current_state is None:
        return ContainerState(
            name=name, state="waiting", reason="ContainerCreating", image=str(container.image or "")
        )
    current = view.current_state
    restarts = view.restart_count or 0
    previous = None
    if view.previous_state is not None and view.previous_state.state == "Terminated":
        previous = _terminated(name, view.previous_state)
    kind = (current.state or "").lower()
    if kind == "running":
        return ContainerState(
            name=name,
            state="running",
            started_at=_aware(current.start_time),
            restart_count=restarts,
            ready=ready,
            last_terminated=previous,
            image=str(container.image or ""),
        )
    if kind == "terminated":
        done = _terminated(name, current, restarts)
        code = done.exit_code or 0
        again = restart_policy == "Always" or (restart_policy == "OnFailure" and code != 0)
        if again and not stopped and isinstance(container, m.Container):
            return ContainerState(
                name=name,
                state="waiting",
                reason="CrashLoopBackOff",
                message=f"back-off restarting failed container {name}",
                restart_count=restarts,
                last_terminated=done,
                image=str(container.image or ""),
            )
        return ContainerState(
            name=done.name,
            state="terminated",
            reason=done.reason,
            exit_code=done.exit_code,
            started_at=done.started_at,
            finished_at=done.finished_at,
            restart_count=restarts,
            last_terminated=previous,
            image=str(container.image or ""),
        )
    reason = current.detail_status or "ContainerCreating"
    if reason in ("", "Pending", "Waiting"):
        reason = "ContainerCreating"
    return ContainerState(
        name=name,
        state="waiting",
        reason=reason,
        message=_last_event(view.events),
        restart_count=restarts,
        last_terminated=previous,
        image=str(container.image or ""),
    )


def _events(container: m.Container | m.InitContainerDefinition) -> list[m.Event]:
    view = container.instance_view
    return list(view.events or []) if view is not None else []


def pod_state(group: m.ContainerGroup, note: str | None = None) -> PodState:
    """The pod's state from the group (as GET answers it, with instance views)."""
    policy = str(group.restart_policy or "Always")
    provisioning = str(group.provisioning_state or "Pending")
    view = group.instance_view
    group_state = str(view.state) if view is not None and view.state else ""
    ip = group.ip_address.ip if group.ip_address is not None else None
    events: list[m.Event] = list(view.events or []) if view is not None else []
    evicted = [e for e in events if e.name in EVICTION_EVENTS]
    containers: list[m.Container] = list(group.containers or [])
    inits: list[m.InitContainerDefinition] = list(group.init_containers or [])
    stopped = group_state == "Stopped"
    everyone: list[m.Container | m.InitContainerDefinition] = [*inits, *containers]
    if provisioning == "Failed":
        failure = (
            _last_event([e for c in everyone for e in _events(c)])
            or f"ACI could not deploy the container group ({group_state or 'Failed'})"
        )
        waiting = tuple(
            ContainerState(
                name=str(c.name), state="waiting", reason="ProviderFailed", message=failure
            )
            for c in containers
        )
        return PodState(
            phase="Failed", containers=waiting, reason="ProviderFailed", message=failure, pod_ip=ip
        )
    if provisioning in DEPLOYING or not group_state:
        return PodState(
            phase="Pending",
            containers=tuple(
                ContainerState(name=str(c.name), state="waiting", reason="ContainerCreating")
                for c in containers
            ),
            init_containers=tuple(
                ContainerState(name=str(c.name), state="waiting", reason="PodInitializing")
                for c in inits
            ),
            message=note,
        )
    states = tuple(container_state(c, policy, stopped) for c in containers)
    init_states = tuple(container_state(c, "Never", stopped) for c in inits)
    starts = [s.started_at for s in (*init_states, *states) if s.started_at]
    started_at = min(starts) if starts else None
    phase: PodPhase
    reason: str | None = None
    message: str | None = note
    if evicted:
        phase, reason = "Failed", "Evicted"
        message = evicted[-1].message or "The platform evicted the Spot container group"
        states = tuple(_stopped(s) for s in states)
    elif stopped:
        phase, reason = "Failed", "Stopped"
        message = _last_event(events) or "The container group was stopped"
        states = tuple(_stopped(s) for s in states)
    elif any(s.state == "terminated" and (s.exit_code or 0) != 0 for s in init_states):
        phase = "Failed" if policy == "Never" else "Pending"
    elif any(s.state != "terminated" for s in init_states) and inits:
        phase = "Pending"
    elif any(s.state != "terminated" for s in states):
        phase = "Running"
    elif all((s.exit_code or 0) == 0 for s in states):
        phase = "Succeeded"
    else:
        phase = "Failed"
    return PodState(
        phase=phase,
        containers=states,
        init_containers=init_states,
        reason=reason,
        message=message,
        started_at=started_at,
        pod_ip=ip,
    )


def _stopped(state: ContainerState) -> ContainerState:
    if state.state == "terminated":
        return state
    return ContainerState(
        name=state.name,
        state="terminated",
        reason="Evicted" if state.state == "running" else "ContainerCannotRun",
        exit_code=137,
        started_at=state.started_at,
        restart_count=state.restart_count,
        image=state.image,
    )


def steady(group: m.ContainerGroup) -> bool:
    """Whether nothing is expected to change soon (deployed, and every container
    running or finished for good)."""
    if group.provisioning_state != "Succeeded":
        return False
    state = pod_state(group)
    return all(c.state == "running" for c in state.containers) or state.phase in (
        "Succeeded",
        "Failed",
    )


def failed(state: PodState, reason: str, message: str) -> PodState:
    """A failed deployment's state with the operation's own reason and message."""
    return _deployment_said(state, "Failed", reason, message, state.pod_ip)


def retrying(state: PodState, reason: str, message: str) -> PodState:
    """A deployment that failed for want of capacity or quota and is tried again: the
    pod stays Pending with the platform's reason and message."""
    return _deployment_said(state, "Pending", reason, message, None)


def _deployment_said(
    state: PodState, phase: PodPhase, reason: str, message: str, pod_ip: str | None
) -> PodState:
    """`state` in `phase`, every container waiting with the deployment's words."""
    return PodState(
        phase=phase,
        containers=tuple(
            ContainerState(name=c.name, state="waiting", reason=reason, message=message)
            for c in state.containers
        ),
        reason=reason,
        message=message,
        pod_ip=pod_ip,
    )
