"""Turning a backend's view of a pod into the pod status the kubelet would write.

Pure functions, no I/O: `desired_status` builds the kubelet-owned part of a pod's
status (phase, conditions, IPs, container statuses) from a `PodState`, and
`status_patch` compares it with what the API server has and returns the smallest
strategic-merge patch of the `status` subresource, or nothing when nothing changed.
Conditions merge by type, so conditions others wrote (readiness gates) are untouched.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime

from vkpy.core.objects import (
    KubeObject,
    conditions_of,
    containers_of,
    ephemeral_containers_of,
    init_containers_of,
    meta,
    status,
)
from vkpy.core.rfc3339 import format_time, parse_or_none
from vkpy.node.pods.pod_conditions import Condition, pod_conditions, restartable
from vkpy.providers.base import ContainerState, PodState

KUBELET_CONDITIONS = (
    "PodReadyToStartContainers",
    "Initialized",
    "Ready",
    "ContainersReady",
    "PodScheduled",
)
TERMINAL_PHASES = frozenset({"Succeeded", "Failed"})
EVICTED = "Evicted"
DISRUPTION_TARGET = "DisruptionTarget"
_REPLACED_LISTS = ("podIPs", "hostIPs")
_OWNED_FIELDS = (
    "phase",
    "reason",
    "message",
    "hostIP",
    "hostIPs",
    "podIP",
    "podIPs",
    "startTime",
    "initContainerStatuses",
    "containerStatuses",
    "ephemeralContainerStatuses",
)


def timestamp(value: datetime) -> str:
    """RFC 3339 in UTC, seconds precision, as metav1.Time serializes."""
    return format_time(value)


@dataclass(frozen=True)
class StatusContext:
    """What, besides the backend's state, the status depends on."""

    host_ip: str
    now: datetime
    sandbox_ready: bool = True
    """False until the backend accepted the pod (PodReadyToStartContainers)."""


def desired_status(pod: KubeObject, state: PodState, ctx: StatusContext) -> KubeObject:
    """The kubelet-owned status fields for `pod` given the backend's `state`."""
    current = status(pod)
    pod_ip = state.pod_ip or ctx.host_ip
    init_specs = init_containers_of(pod)
    container_specs = containers_of(pod)
    init_statuses = _container_statuses(
        init_specs, state.init_containers, current, "PodInitializing", init=True
    )
    # The kubelet's default for a container it has not started: PodInitializing in a
    # pod with init containers (until it runs), else ContainerCreating.
    waiting = "PodInitializing" if init_specs else "ContainerCreating"
    container_statuses = _container_statuses(container_specs, state.containers, current, waiting)
    started = state.started_at or parse_or_none(current.get("startTime")) or ctx.now
    out: KubeObject = {
        "phase": state.phase,
        "reason": state.reason,
        "message": state.message,
        "hostIP": ctx.host_ip,
        "hostIPs": [{"ip": ctx.host_ip}],
        "podIP": pod_ip,
        "podIPs": [{"ip": pod_ip}],
        "startTime": current.get("startTime") or timestamp(started),
        "containerStatuses": container_statuses,
    }
    if init_specs:
        out["initContainerStatuses"] = init_statuses
    ephemeral_specs = ephemeral_containers_of(pod)
    if ephemeral_specs:
        out["ephemeralContainerStatuses"] = _container_statuses(
            ephemeral_specs,
            state.ephemeral_containers,
            current,
            "ContainerCreating",
            ephemeral=True,
        )
    out["conditions"] = _conditions(pod, state, ctx, init_statuses, container_statuses)
    return out


def _container_statuses(
    specs: Sequence[KubeObject],
    states: Sequence[ContainerState],
    current: KubeObject,
    waiting_reason: str,
    *,
    init: bool = False,
    ephemeral: bool = False,
) -> list[KubeObject]:
    by_name = {s.name: s for s in states}
    field = "initContainerStatuses" if init else "containerStatuses"
    if ephemeral:
        field = "ephemeralContainerStatuses"
    previous = {c.get("name"): c for c in current.get(field) or []}
    out = []
    for container in specs:
        name = container.get("name", "")
        image = container.get("image", "")
        state = by_name.get(name)
        if state is None:
            out.append(_waiting_status(name, image, waiting_reason, previous.get(name)))
            continue
        completed_init = init and not restartable(container)
        out.append(_container_status(state, image, completed_init))
    return out


def _waiting_status(name: str, image: str, reason: str, previous: KubeObject | None) -> KubeObject:
    restart_count = int((previous or {}).get("restartCount", 0))
    return {
        "name": name,
        "image": image,
        "imageID": "",
        "ready": False,
        "started": False,
        "restartCount": restart_count,
        "state": {"waiting": {"reason": reason}},
        "lastState": {},
    }


def _state_dict(state: ContainerState) -> KubeObject:
    if state.state == "running":
        running: KubeObject = {}
        if state.started_at:
            running["startedAt"] = timestamp(state.started_at)
        return {"running": running}
    if state.state == "terminated":
        terminated: KubeObject = {"exitCode": state.exit_code or 0}
        for key, value in (
            ("signal", state.signal),
            ("reason", state.reason),
            ("message", state.message),
            ("containerID", state.container_id or None),
        ):
            if value:
                terminated[key] = value
        if state.started_at:
            terminated["startedAt"] = timestamp(state.started_at)
        if state.finished_at:
            terminated["finishedAt"] = timestamp(state.finished_at)
        return {"terminated": terminated}
    waiting: KubeObject = {}
    if state.reason:
        waiting["reason"] = state.reason
    if state.message:
        waiting["message"] = state.message
    return {"waiting": waiting}


def _container_status(state: ContainerState, spec_image: str, init: bool = False) -> KubeObject:
    """One container's status; `init` for a regular (not restartable) init container,
    which the kubelet reports ready once it completed (exit code 0)."""
    running = state.state == "running"
    started = state.started if state.started is not None else running
    ready = bool(state.ready and running)
    if init:
        ready = state.state == "terminated" and state.exit_code == 0
    out: KubeObject = {
        "name": state.name,
        "image": state.image or spec_image,
        "imageID": state.image_id,
        "ready": ready,
        "started": bool(started and running),
        "restartCount": state.restart_count,
        "state": _state_dict(state),
        "lastState": _state_dict(state.last_terminated) if state.last_terminated else {},
    }
    if state.container_id:
        out["containerID"] = state.container_id
    return out


def _conditions(
    pod: KubeObject,
    state: PodState,
    ctx: StatusContext,
    init_statuses: list[KubeObject],
    container_statuses: list[KubeObject],
) -> list[KubeObject]:
    """The five conditions the kubelet owns, as the kubelet words them (pod_conditions.py),
    and DisruptionTarget on a pod its platform evicted."""
    current = conditions_of(pod)
    sandbox = ctx.sandbox_ready and state.phase not in TERMINAL_PHASES
    values = [
        Condition("PodReadyToStartContainers", sandbox),
        *pod_conditions(pod, state.phase, init_statuses, container_statuses, current),
        Condition("PodScheduled", True),
    ]
    if state.phase == "Failed" and state.reason == EVICTED:
        # The backend's platform took the pod's capacity back (a Spot eviction): the
        # kubelet marks its own evictions so, and a Job's podFailurePolicy can tell a
        # disruption from a failure by it.
        values.append(Condition(DISRUPTION_TARGET, True, "TerminationByKubelet", state.message))
    have = {c.get("type"): c for c in current}
    now = timestamp(ctx.now)  # once, not per condition
    out = []
    for item in values:
        value = "True" if item.ok else "False"
        previous = have.get(item.kind) or {}
        changed_at = previous.get("lastTransitionTime") if previous.get("status") == value else None
        condition: KubeObject = {
            "type": item.kind,
            "status": value,
            "lastProbeTime": None,
            "lastTransitionTime": changed_at or now,
        }
        if item.reason:
            condition["reason"] = item.reason
        if item.message:
            condition["message"] = item.message
        out.append(condition)
    return out


def _condition_core(condition: KubeObject) -> tuple[object, ...]:
    return (condition.get("status"), condition.get("reason"), condition.get("message"))


def _clearing(condition: KubeObject, have: KubeObject | None) -> KubeObject:
    """The condition as a patch item: conditions merge by type, so a reason or message
    that should go must be sent as null, or the old one stays (Ready=True with reason
    ContainersNotReady, and a patch that never takes)."""
    out = dict(condition)
    for key in ("reason", "message"):
        if key not in out and (have or {}).get(key):
            out[key] = None
    return out


def status_patch(pod: KubeObject, desired: KubeObject) -> KubeObject | None:
    """The strategic-merge patch that makes `pod`'s status match `desired`, or None.

    Only kubelet-owned fields are compared; a field that should disappear is set to
    null. Conditions are sent only for the types whose status, reason or message
    changed. The patch carries the pod's UID so it never lands on a recreated pod.
    """
    current = status(pod)
    changes: KubeObject = {}
    for field in _OWNED_FIELDS:
        want = desired.get(field)
        have = current.get(field)
        if field == "startTime" and have:
            continue
        if want != have and _normalize(want) != _normalize(have):  # equal: most fields
            changes[field] = want
    have_conditions = {c.get("type"): c for c in current.get("conditions") or []}
    changed_conditions = [
        _clearing(c, have_conditions.get(c["type"]))
        for c in desired.get("conditions") or []
        if c["type"] not in have_conditions
        or _condition_core(c) != _condition_core(have_conditions[c["type"]])
    ]
    if changed_conditions:
        changes["conditions"] = changed_conditions
    if not changes:
        return None
    for field in _REPLACED_LISTS:
        if changes.get(field):
            # These lists merge by IP; a new address must replace the old one, or the
            # API server refuses two IPs of one family.
            changes[field] = [*changes[field], {"$patch": "replace"}]
    return {"metadata": {"uid": meta(pod).get("uid")}, "status": changes}


def _normalize(value: object) -> object:
    """Empty and absent are the same to the API server (omitempty)."""
    if value in (None, "", [], {}):
        return None
    if isinstance(value, list):
        return [_normalize(v) for v in value]
    if isinstance(value, dict):
        out = {}
        for k, v in value.items():
            normal = _normalize(v)  # once per value: twice made it 2^depth
            if normal is not None:
                out[k] = normal
        return out
    return value
