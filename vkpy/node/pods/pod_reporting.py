"""Telling the API server what became of a pod: status patches and Events, and
knowing our own writes when the watch brings them back.

Status is written as the smallest strategic-merge patch of the `status` subresource,
and only when it differs from the API server's copy as last seen (the watch, or the
answer to our own write): never from what vkpy last wrote, so a status someone else
changed (Ready=False during an outage) is written back. What was decided is kept on
the pod's record (`PodRecord.reported`), set by `PodReporter.write` and read only by
`is_echo`, the test that a watched update is the echo of that write (or a bump that
changed nothing of it) and asks for no sync: both here, so what was written and how
its echo is told apart cannot drift. Events follow from what a successful write
changed in container statuses (Started, BackOff) or are emitted directly by the pod
controller. Keeping this apart leaves the controller with the decisions.
"""

from __future__ import annotations

from vkpy.core import metrics
from vkpy.core.clock import Clock, utcnow
from vkpy.core.objects import KubeObject, name_of, namespace_of, status, uid_of
from vkpy.kube.client import ApiError, KubeClient
from vkpy.kube.events import NORMAL, WARNING, EventRecorder, InvolvedObject
from vkpy.node.pods.keyed_queue import Retry
from vkpy.node.pods.pod_record import PodRecord, asks_kubelet
from vkpy.node.pods.pod_status import StatusContext, desired_status, status_patch
from vkpy.node.podspec.pod_object import pod_path, pod_ref
from vkpy.providers.base import PodState


def is_echo(r: PodRecord, update: KubeObject) -> bool:
    """Whether the status in a watched `update` of the record's pod still says what
    was last decided for it: the echo of our own write, or a bump that changed none
    of the fields the kubelet owns. False when nothing was decided yet, or when
    someone else changed what vkpy decided (the node lifecycle controller's
    Ready=False): then the pod is synced and its status written back."""
    decided = r.reported  # decoded from its packed form at each read: once here
    return decided is not None and status_patch(update, decided) is None


class PodReporter:
    def __init__(
        self, client: KubeClient, events: EventRecorder, host_ip: str, clock: Clock
    ) -> None:
        self._clock = clock
        self._client = client
        self._events = events
        self._host_ip = host_ip

    async def write(
        self, r: PodRecord, pod: KubeObject, state: PodState, sandbox_ready: bool
    ) -> None:
        """Report the pod in `state`: the status the kubelet would write, kept on the
        record as what was decided (before the write: its echo may come first), patched
        where it differs from `pod` as the API server last showed it; the API's answer
        becomes the record's object, unless it shows a change of someone else's too.
        Raises Retry for failures worth retrying."""
        ctx = StatusContext(
            host_ip=self._host_ip, now=utcnow(self._clock), sandbox_ready=sandbox_ready
        )
        desired = desired_status(pod, state, ctx)
        r.reported = desired
        updated = await self._patch(pod, desired)
        if updated is not None and r.present and r.older_than(updated):
            if asks_kubelet(r.pod, updated):
                # Someone else's change (a delete) landed just before our write: the
                # answer shows it, and is newer than the watch's event of it. Held, it
                # would have the watch pass over both events as old; not held, the
                # watch's event of that change syncs the pod.
                return
            r.pod = updated

    async def _patch(self, pod: KubeObject, desired: KubeObject) -> KubeObject | None:
        """Patch the pod's status to `desired`, compared with `pod`; the updated pod, or
        None when nothing needed writing (or the pod is gone). Events for what changed
        follow a successful write only."""
        patch = status_patch(pod, desired)
        if patch is None:
            metrics.labelled(metrics.STATUS_UPDATES, "unchanged").inc()
            return None
        ref = pod_ref(pod)
        try:
            updated = await self._client.patch(pod_path(ref) + "/status", patch)
        except ApiError as error:
            metrics.labelled(metrics.STATUS_UPDATES, "failed").inc()
            if error.not_found or error.conflict:
                return None
            raise Retry(f"status patch {ref}: {error}") from error
        metrics.labelled(metrics.STATUS_UPDATES, "written").inc()
        self._container_events(pod, desired)
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
        self._events.emit(
            InvolvedObject(
                kind="Pod",
                name=name_of(pod),
                namespace=namespace_of(pod),
                uid=uid_of(pod),
                field_path=f"spec.containers{{{container}}}" if container else "",
            ),
            event_type,
            reason,
            message,
        )
