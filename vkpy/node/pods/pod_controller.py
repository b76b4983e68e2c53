"""The kubelet's pod loop: run what is bound to this node, report what became of it.

The controller keeps one record per pod (see pod_record) fed by a list+watch of
this node's pods, and reconciles a pod (by UID, one operation at a time per pod)
when its object changed in a way the kubelet reacts to, when the backend says its
state may have changed, or when one of its timers fires. What a reconcile does is
in pod_life; the controller owns the records, the inputs, adoption of what the
backend already runs at start, and what the kubelet API reads. Backends that cannot
push are polled through an adapter (polling), so the controller only knows push.
"""

from __future__ import annotations

import asyncio
import logging

from vkpy.core import metrics
from vkpy.core.clock import SYSTEM_CLOCK, Clock
from vkpy.core.flag import Flag
from vkpy.core.objects import KubeObject, uid_of
from vkpy.kube.client import KubeClient
from vkpy.kube.events import EventRecorder
from vkpy.kube.watch import Watcher, WatchOptions
from vkpy.node.pods.keyed_queue import KeyedQueue
from vkpy.node.pods.next_wake import Wake
from vkpy.node.pods.pod_life import PodLife
from vkpy.node.pods.pod_record import Absent, Created, PodRecord, asks_kubelet
from vkpy.node.pods.pod_reporting import PodReporter, is_echo
from vkpy.node.pods.polling import push_or_poll
from vkpy.node.pods.running_pods import running_pods
from vkpy.node.pods.shared_pod_watch import SharedPodWatch
from vkpy.node.podspec.ephemeral import EphemeralContainers
from vkpy.node.podspec.pod_object import pod_ref
from vkpy.node.podspec.volumes import VolumeSource
from vkpy.node.settings import PodControllerSettings
from vkpy.providers.base import PodRef, Provider
from vkpy.providers.errors import RetryableError

__all__ = ["PodController", "PodControllerSettings", "needs_sync"]

log = logging.getLogger(__name__)


def needs_sync(record: PodRecord, update: KubeObject) -> bool:
    """Whether a watched update of the record's pod asks anything of the kubelet: a
    change of spec or metadata (pod_record.asks_kubelet), or a status that no longer
    says what vkpy decided (pod_reporting.is_echo). The echo of our own write, and a
    bare resourceVersion bump, cost no sync and no backend call."""
    return asks_kubelet(record.view(), update) or not is_echo(record, update)


class PodController:
    """Owns this node's pods. `run` lists, adopts, then keeps everything in step."""

    def __init__(
        self,
        client: KubeClient,
        provider: Provider,
        events: EventRecorder,
        objects: VolumeSource,
        settings: PodControllerSettings,
        clock: Clock = SYSTEM_CLOCK,
        shared_watch: SharedPodWatch | None = None,
    ) -> None:
        """`shared_watch`: the process's one pod watch for many nodes (this controller
        attaches to it and does not watch on its own; whoever made it runs it)."""
        self._provider = provider
        self._clock = clock
        self._records: dict[str, PodRecord] = {}
        self._names: dict[tuple[str, str], str | tuple[str, ...]] = {}
        """(namespace, name) -> the UID of the record with that name, or the UIDs in
        the order seen while a pod replaces one still held, so the kubelet API finds a
        pod without walking every record (a dict per name was 1.4 MiB at 10,000 pods)."""
        self._queue = KeyedQueue(self._sync, settings.workers, clock=clock, starts=self._starts)
        report = PodReporter(client, events, settings.host_ip, clock)
        self._ephemeral = EphemeralContainers(provider, events, objects, settings.host_ip)
        self._status, self._poller = push_or_poll(
            provider, settings.poll_interval, clock, self._in_backend
        )
        self._status.on_status_change(self.notify)
        self._life = PodLife(
            client,
            provider,
            self._status,
            report,
            objects,
            settings,
            clock,
            self._ephemeral,
        )
        self._watcher: Watcher | None = None
        if shared_watch is None:
            self._watcher = Watcher(
                client,
                WatchOptions(
                    path="/api/v1/pods",
                    field_selector=f"spec.nodeName={settings.node_name}",
                    stream_initial=True,
                ),
                self,
                clock=clock,
            )
            self._synced = self._watcher.synced
        else:
            self._synced = shared_watch.synced
        self.ready = Flag()
        """Set once the first list is in and backend pods are adopted."""
        if shared_watch is not None:  # last: it may hand over the node's pods at once
            shared_watch.attach(settings.node_name, self)

    def _starts(self, uid: str) -> bool:
        """Whether the pod's sync would start it: on the API server, not in the backend
        (its key waits in the queue's lane of starts)."""
        record = self._records.get(uid)
        return record is not None and record.present and isinstance(record.stage, Absent)

    def _in_backend(self) -> list[PodRef]:
        return [r.ref for r in self._records.values() if r.in_backend]

    # --- inputs -------------------------------------------------------------------

    def notify(self, ref: PodRef) -> None:
        """The backend says this pod's state may have changed.

        During the pod's own sync (a backend says so from inside create_pod) this only
        marks the record: the sync's read of the state, if it comes after, covers the
        change; if it does not come, the pod is synced again when the sync ends."""
        record = self._records.get(ref.uid)
        if record is None:
            return
        if self._queue.running(ref.uid):
            record.unread_change = True
        else:
            self._queue.add(ref.uid)

    def _wake(self, uid: str) -> None:
        if self.ready.is_set():
            self._queue.add(uid)

    def _seen(self, pod: KubeObject) -> None:
        uid = uid_of(pod)
        record = self._records.get(uid)
        if record is None:
            self._remember(PodRecord(ref=pod_ref(pod), pod=pod))
            metrics.PODS.inc()
            self._wake(uid)
        elif record.older_than(pod):
            relevant = needs_sync(record, pod)
            if not record.present:
                metrics.PODS.inc()
            record.pod = pod
            if relevant:
                self._wake(uid)
            elif not self._queue.running(uid):
                record.settle()  # nothing to do: keep it packed (a sync under way settles it)

    def _gone(self, uid: str) -> None:
        record = self._records.get(uid)
        if record is not None and record.present:
            record.pod = None
            metrics.PODS.dec()
            self._wake(uid)

    def _remember(self, record: PodRecord) -> PodRecord:
        ref = record.ref
        self._records[ref.uid] = record
        key = (ref.namespace, ref.name)
        held = self._uids_named(key)
        if ref.uid not in held:
            self._names[key] = (*held, ref.uid) if held else ref.uid
        return record

    def _forget(self, record: PodRecord) -> None:
        ref = record.ref
        del self._records[ref.uid]
        key = (ref.namespace, ref.name)
        left = tuple(uid for uid in self._uids_named(key) if uid != ref.uid)
        if left:
            self._names[key] = left if len(left) > 1 else left[0]
        else:
            self._names.pop(key, None)

    def _uids_named(self, key: tuple[str, str]) -> tuple[str, ...]:
        held = self._names.get(key, ())
        return (held,) if isinstance(held, str) else held

    def replace(self, items: list[KubeObject]) -> None:
        fresh = {uid_of(p) for p in items}
        for uid in [u for u in self._records if u not in fresh]:
            self._gone(uid)
        for pod in items:
            self._seen(pod)

    def apply(self, event_type: str, obj: KubeObject) -> None:
        if event_type == "DELETED":
            self._gone(uid_of(obj))
        else:
            self._seen(obj)

    # --- the loop -----------------------------------------------------------------

    async def run(self) -> None:
        if self._watcher is None and self._poller is None:
            # a node of a set (the watch is shared) on a backend that pushes: the queue
            # runs in this task, without a group and a task of its own per node
            await self._synced.wait()
            await self._start()
            await self._queue.run()
            return
        async with asyncio.TaskGroup() as group:
            if self._watcher is not None:
                group.create_task(self._watcher.run(), name="pod-watch")
            await self._synced.wait()
            await self._start()
            group.create_task(self._queue.run(), name="pod-workers")
            if self._poller is not None:
                group.create_task(self._poller.run(), name="pod-status-poll")

    async def _start(self) -> None:
        """After the first list: adopt what the backend runs, then sync every pod."""
        await self._adopt()
        self.ready.set()
        for uid in list(self._records):
            self._queue.add(uid)

    async def _adopt(self) -> None:
        """Take over what the backend already runs; what no pod owns is removed."""
        delay = 0.5
        while True:
            try:
                existing = await self._provider.list_pods()
                break
            except RetryableError as error:
                log.warning("backend list failed, retrying", extra={"error": str(error)})
                await self._clock.sleep(max(delay, error.retry_after or 0.0))
                delay = min(delay * 2, 10)
        orphans = 0
        for ref in existing:
            record = self._records.get(ref.uid) or self._remember(PodRecord(ref=ref, pod=None))
            if isinstance(record.stage, Absent):
                record.stage = Created()
            orphans += not record.present
        log.info("adopted backend pods", extra={"pods": len(existing), "orphans": orphans})

    async def _sync(self, uid: str) -> None:
        record = self._records.get(uid)
        if record is None:
            return
        wake: Wake | None = None
        try:
            wake = await self._life.sync(record)
        finally:
            if not record.present and not record.in_backend:
                self._forget(record)  # forgetting a pod is removing its record
                self._queue.drop(uid)
                self._ephemeral.forget(uid)
            else:  # a failed sync leaves its back-off to the queue; timers follow the record
                self._apply(uid, wake if wake is not None else self._life.wake(record))
                if record.unread_change:  # changed after its state was read: sync again
                    record.unread_change = False
                    self._queue.add(uid)
                record.settle()

    def _apply(self, uid: str, wake: Wake) -> None:
        """Arm, move or cancel the pod's timers as its sync said; requeue it if asked."""
        for reason, delay in wake.timers:
            self._queue.schedule(uid, reason, delay)
        if wake.at_once:
            self._queue.add(uid)

    # --- what the kubelet API reads ------------------------------------------------

    def pods(self) -> list[KubeObject]:
        """The node's pods as last seen (for the kubelet API's /pods), each decoded for
        the caller."""
        return [pod for r in self._records.values() if (pod := r.view()) is not None]

    def pod_documents(self) -> list[bytes]:
        """The node's pods as /pods sends them: each one's JSON as its record holds it
        (a settled pod is neither decoded nor encoded)."""
        return [r.json() for r in self._records.values() if r.present]

    def find(self, namespace: str, name: str, uid: str | None = None) -> KubeObject | None:
        """The node's pod with this namespace and name (and uid, when given), if any."""
        for candidate in self._uids_named((namespace, name)):
            record = self._records[candidate]
            if record.present and (uid is None or candidate == uid):
                return record.view()
        return None

    async def running_pods(self) -> list[KubeObject]:
        """The pods the backend runs, for /runningpods/."""

        def lookup(uid: str) -> KubeObject | None:
            record = self._records.get(uid)
            return None if record is None else record.view()

        return await running_pods(self._provider, lookup)

    def idle(self) -> bool:
        return not self._queue.busy()
