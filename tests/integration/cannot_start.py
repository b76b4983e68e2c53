"""Waiting for a pod whose containers cannot start, as the kubelet shows it.

Such a pod is not Failed (issue 31: a Failed pod is replaced by its ReplicaSet at
once, thousands in minutes): it stays Pending, a container Waiting with a reason
(CreateContainerConfigError, CreateContainerError, ErrImagePull, ...), and a
Warning `Failed` Event says why. Shared by the integration tests that used to wait
for Failed.
"""

from __future__ import annotations

from typing import Any

from tests.integration.agent import Kube, wait_for


def waiting_reason(pod: dict[str, Any] | None) -> tuple[str, str] | None:
    """The first container's waiting (reason, message) on a Pending pod, if it has one
    other than the kubelet's ContainerCreating."""
    status = (pod or {}).get("status") or {}
    if status.get("phase") != "Pending":
        return None
    for container in status.get("containerStatuses") or []:
        waiting = (container.get("state") or {}).get("waiting") or {}
        if waiting.get("reason") not in (None, "ContainerCreating", "PodInitializing"):
            return str(waiting["reason"]), str(waiting.get("message", ""))
    return None


def cannot_start(kube: Kube, name: str, timeout: float = 60) -> dict[str, Any]:
    """Wait until pod `name` is Pending with a container Waiting for a reason and a
    Warning Event; returns {"pod", "reason", "message", "events"} (Warning Events)."""

    def found() -> dict[str, Any] | None:
        pod = kube.get("pod", name)
        waiting = waiting_reason(pod)
        if waiting is None:
            return None
        events = [e for e in kube.events(name) if e["type"] == "Warning"]
        if not events:
            return None
        return {"pod": pod, "reason": waiting[0], "message": waiting[1], "events": events}

    result: dict[str, Any] = wait_for(f"{name} waiting with a reason", found, timeout=timeout)
    return result
