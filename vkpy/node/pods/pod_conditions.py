"""The four pod conditions the kubelet derives from container statuses, in its words.

Initialized, ContainersReady and Ready follow the kubelet's rules (its status
generator): an init container counts as initialized when it completed (ready) or,
for a restartable "sidecar" init container, when it started; once any app container
has run the pod stays initialized; a Succeeded pod is PodCompleted, a Failed one has
unready containers (PodFailed); otherwise the reason is ContainersNotInitialized or
ContainersNotReady with a message naming the containers (`containers with incomplete
status: [a b]`, `containers with unready status: [c]`, `containers with unknown
status: [...]`), and Ready repeats ContainersReady unless readiness gates hold it
back. Pure, so each rule is unit-tested; pod_status.py adds the transition times.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from vkpy.core.objects import KubeObject, containers_of, init_containers_of, spec

PodCompleted = "PodCompleted"
PodFailed = "PodFailed"


@dataclass(frozen=True)
class Condition:
    kind: str
    ok: bool
    reason: str | None = None
    message: str | None = None


def go_list(names: Sequence[str]) -> str:
    """A list of names as Go's %s prints a []string: `[a b]`."""
    return "[" + " ".join(names) + "]"


def restartable(container: KubeObject) -> bool:
    return container.get("restartPolicy") == "Always"


def _by_name(statuses: Sequence[KubeObject]) -> Mapping[str, KubeObject]:
    return {str(s.get("name")): s for s in statuses}


def _messages(unknown: list[str], other: list[str], what: str) -> str:
    parts = []
    if unknown:
        parts.append(f"containers with unknown status: {go_list(unknown)}")
    if other:
        parts.append(f"containers with {what} status: {go_list(other)}")
    return ", ".join(parts)


def _any_app_started(pod: KubeObject, statuses: Sequence[KubeObject]) -> bool:
    names = {c.get("name") for c in containers_of(pod)}
    return any(
        s.get("name") in names and ("running" in s["state"] or "terminated" in s["state"])
        for s in statuses
    )


def initialized(
    pod: KubeObject, phase: str, inits: Sequence[KubeObject], apps: Sequence[KubeObject]
) -> Condition:
    kind = "Initialized"
    known = _by_name(inits)
    unknown: list[str] = []
    incomplete: list[str] = []
    for container in init_containers_of(pod):
        name = str(container.get("name"))
        status = known.get(name)
        if status is None:
            unknown.append(name)
        elif not (status.get("started") if restartable(container) else status.get("ready")):
            incomplete.append(name)
    if phase == "Succeeded" and not unknown:
        return Condition(kind, True, PodCompleted)
    if _any_app_started(pod, apps):
        return Condition(kind, True)
    message = _messages(unknown, incomplete, "incomplete")
    if message:
        return Condition(kind, False, "ContainersNotInitialized", message)
    return Condition(kind, True)


def containers_ready(
    pod: KubeObject, phase: str, inits: Sequence[KubeObject], apps: Sequence[KubeObject]
) -> Condition:
    kind = "ContainersReady"
    known = {**_by_name(inits), **_by_name(apps)}
    unknown: list[str] = []
    unready: list[str] = []
    sidecars = [c for c in init_containers_of(pod) if restartable(c)]
    for container in (*sidecars, *containers_of(pod)):
        name = str(container.get("name"))
        status = known.get(name)
        if status is None:
            unknown.append(name)
        elif not status.get("ready"):
            unready.append(name)
    if phase == "Succeeded" and not unknown:
        return Condition(kind, False, PodCompleted)
    if phase == "Failed":
        return Condition(kind, False, PodFailed)
    message = _messages(unknown, unready, "unready")
    if message:
        return Condition(kind, False, "ContainersNotReady", message)
    return Condition(kind, True)


def ready(pod: KubeObject, containers: Condition, current: Sequence[KubeObject]) -> Condition:
    """Ready: ContainersReady's verdict, then the readiness gates (conditions others set)."""
    kind = "Ready"
    if not containers.ok:
        return Condition(kind, False, containers.reason, containers.message)
    have = {c.get("type"): c for c in current}
    problems = []
    for gate in spec(pod).get("readinessGates") or []:
        name = str(gate.get("conditionType"))
        condition = have.get(name)
        if condition is None:
            problems.append(
                f'corresponding condition of pod readiness gate "{name}" does not exist.'
            )
        elif condition.get("status") != "True":
            problems.append(
                f'the status of pod readiness gate "{name}" is not "True", '
                f"but {condition.get('status')}"
            )
    if problems:
        return Condition(kind, False, "ReadinessGatesNotReady", ", ".join(problems))
    return Condition(kind, True)


def pod_conditions(
    pod: KubeObject,
    phase: str,
    inits: Sequence[KubeObject],
    apps: Sequence[KubeObject],
    current: Sequence[KubeObject],
) -> list[Condition]:
    """Initialized, ContainersReady and Ready for these container statuses; `current`
    is the pod's conditions as the API server has them (for readiness gates)."""
    containers = containers_ready(pod, phase, inits, apps)
    return [initialized(pod, phase, inits, apps), containers, ready(pod, containers, current)]
