"""Telling the API server what became of a pod: status patches and Events.

Status is written as the smallest strategic-merge patch of the `status` subresource,
and only when it changed since the API server's copy and since what vkpy itself last
wrote (so a watch event that lags behind our own write costs nothing). Events follow
from what changed in container statuses (Started, BackOff) or are emitted directly
by the pod controller. Keeping this apart leaves the controller with the decisions.
"""

from __future__ import annotations

from datetime import UTC, datetime

from vkpy import metrics
from vkpy.kube.client import ApiError, KubeClient
from vkpy.kube.events import NORMAL, WARNING, EventRecorder, InvolvedObject
from vkpy.node.keyed_queue import Retry
from vkpy.node.pod_config import pod_ref
from vkpy.node.pod_status import StatusContext, desired_status, status_patch
from vkpy.objects import KubeObject, meta, status
from vkpy.providers.base import PodRef, PodState


def pod_path(ref: PodRef) -> str:
    return f"/api/v1/namespaces/{ref.namespace}/pods/{ref.name}"


class PodReporter:
    def __init__(self, client: KubeClient, events: EventRecorder, host_ip: str) -> None:
        self._client = client
        self._events = events
        self._host_ip = host_ip
        self._written: dict[str, KubeObject] = {}

    def forget(self, uid: str) -> None:
        self._written.pop(uid, None)

    async def write_status(
        self, pod: KubeObject, state: PodState, sandbox_ready: bool
    ) -> KubeObject | None:
        """Patch the pod's status to match `state`; the updated pod, or None if nothing
        was written. Raises Retry for failures worth retrying."""
        ctx = StatusContext(
            host_ip=self._host_ip, now=datetime.now(UTC), sandbox_ready=sandbox_ready
        )
        desired = desired_status(pod, state, ctx)
        uid = str(meta(pod).get("uid"))
        patch = status_patch(pod, desired)
        if patch is None or _same(self._written.get(uid), desired):
            metrics.STATUS_UPDATES.labels("unchanged").inc()
            return None
        self._container_events(pod, desired)
        ref = pod_ref(pod)
        try:
            updated = await self._client.patch(pod_path(ref) + "/status", patch)
        except ApiError as error:
            metrics.STATUS_UPDATES.labels("failed").inc()
            if error.not_found or error.conflict:
                return None
            raise Retry(f"status patch {ref}: {error}") from error
        metrics.STATUS_UPDATES.labels("written").inc()
        self._written[uid] = desired
        return updated

    def _container_events(self, pod: KubeObject, desired: KubeObject) -> None:
        """Started and BackOff Events from what changed in container statuses."""
        before = {
            c.get("name"): c.get("state") or {} for c in status(pod).get("containerStatuses") or []
        }
        for container in desired.get("containerStatuses") or []:
            name = container["name"]
            now_state = container["state"]
            old_state = before.get(name, {})
            running = now_state.get("running")
            if running is not None and running != old_state.get("running"):
                self.event(pod, NORMAL, "Started", f"Started container {name}", name)
            waiting = now_state.get("waiting") or {}
            if waiting.get("reason") == "CrashLoopBackOff" and (
                (old_state.get("waiting") or {}).get("reason") != "CrashLoopBackOff"
            ):
                self.event(pod, WARNING, "BackOff", "Back-off restarting failed container", name)

    def event(
        self,
        pod: KubeObject,
        event_type: str,
        reason: str,
        message: str,
        container: str | None = None,
    ) -> None:
        """Queue an Event about the pod (or one of its containers)."""
        m = meta(pod)
        self._events.emit(
            InvolvedObject(
                kind="Pod",
                name=str(m.get("name")),
                namespace=str(m.get("namespace")),
                uid=str(m.get("uid")),
                field_path=f"spec.containers{{{container}}}" if container else "",
            ),
            event_type,
            reason,
            message,
        )


def _same(written: KubeObject | None, desired: KubeObject) -> bool:
    """Whether `desired` equals what was last written, ignoring transition times."""
    if written is None:
        return False

    def strip(value: KubeObject) -> KubeObject:
        conditions = [
            {k: v for k, v in c.items() if k != "lastTransitionTime"}
            for c in value.get("conditions") or []
        ]
        return {**value, "conditions": conditions}

    return strip(written) == strip(desired)
