"""Registering this node and keeping its status true.

Creates the Node (or adopts an existing one, merging our labels and taints into
what is there without removing anything others added; API errors and conflicts with
the node lifecycle controller are retried with back-off, not fatal), then pings the
backend every `check_interval` and patches `nodes/<name>/status` when something
changed and at least every `status_interval` as a heartbeat. A failing ping, or a
backend task that keeps failing, turns the node NotReady with the reason. Patches
are strategic merges that touch only the fields the kubelet owns.
"""

from __future__ import annotations

import hashlib
import logging
import random
from collections.abc import Callable

from vkpy.core import jsoncodec, packed_json
from vkpy.core.clock import SYSTEM_CLOCK, Clock, utcnow
from vkpy.core.flag import Flag
from vkpy.core.objects import KubeObject, conditions_of, meta, spec, uid_of
from vkpy.kube.client import MERGE_PATCH, ApiError, KubeClient
from vkpy.kube.events import NORMAL, WARNING, EventRecorder, InvolvedObject
from vkpy.node.heartbeat.node_status import Health, comparable, labels, node_object, node_status
from vkpy.node.settings import NodeSettings
from vkpy.providers.base import NodeInfo, NodeResources, Provider, UsesPodCIDR
from vkpy.providers.errors import ProviderError

log = logging.getLogger(__name__)

_NO_CONDITIONS = packed_json.pack([])
"""What a node knows of its conditions before the API server first answered."""


def _digest(compared: KubeObject) -> bytes:
    """What a status is told apart by: 16 bytes of its `comparable` form."""
    return hashlib.blake2b(jsoncodec.dumps(compared), digest_size=16).digest()


def _statuses(conditions: list[KubeObject]) -> dict[str, str]:
    """Each condition's status by type: what tells someone else's change apart from
    a heartbeat (whose times change every write)."""
    return {str(c.get("type")): str(c.get("status")) for c in conditions}


class NodeController:
    """Registers the node; `registered` is set (and `uid` known) once it exists."""

    def __init__(
        self,
        client: KubeClient,
        provider: Provider,
        events: EventRecorder,
        settings: NodeSettings,
        clock: Clock = SYSTEM_CLOCK,
        task_problem: Callable[[], str | None] = lambda: None,
    ) -> None:
        self._clock = clock
        self._client = client
        self._task_problem = task_problem
        self._provider = provider
        self._events = events
        self._settings = settings
        self._path = f"/api/v1/nodes/{settings.name}"
        self._last_sent: bytes | None = None
        """A digest of the status last sent without heartbeat times (`comparable`): what
        a new status is compared with (a node of a set kept the whole dicts, 1.5 KiB,
        then their JSON, 1 KiB)."""
        self._last_sent_at = 0.0
        self._sent_sources: tuple[Health, NodeInfo, NodeResources] | None = None
        """What the status last sent was built from."""
        self._conditions = _NO_CONDITIONS
        """The conditions as the API server last answered (their transition times),
        deflated (packed_json) for the same reason."""
        self._resend = False
        """Someone else changed the Node's conditions (`observed`): write the status at
        the next check."""
        self.registered = Flag()
        self.uid = ""
        self.adopted = False
        """Whether `register` found the Node there (so its Lease is likely there too)."""
        self.last_loop_at: float | None = None
        """When the status loop last turned (monotonic), for the liveness probe."""
        self.api_error: str | None = None
        """Why the last status write failed (None: it worked), for the readiness probe."""

    async def run(self) -> None:
        await self.register()
        await self.keep()

    async def keep(self) -> None:
        """After `register`: check the backend and keep the status true, until cancelled."""
        if self._settings.spread:  # many nodes: each at its own point of the period
            self._last_sent_at -= random.uniform(0, self._settings.status_interval)
            await self._clock.sleep(random.uniform(0, self._settings.check_interval))
        self.last_loop_at = self._clock.monotonic()
        while True:
            await self._clock.sleep(self._settings.check_interval)
            try:
                await self.sync()
                self.api_error = None
            except ApiError as error:
                self.api_error = str(error)
                log.warning("node status update failed", extra={"error": str(error)})
            self.last_loop_at = self._clock.monotonic()

    async def _health(self) -> Health:
        try:
            await self._provider.ping()
        except (ProviderError, OSError, TimeoutError) as error:
            return Health(False, "ProviderUnhealthy", f"{self._provider.name}: {error}")
        problem = self._task_problem()
        if problem is not None:
            return Health(False, "BackendTaskFailed", f"{self._provider.name}: {problem}")
        return Health(True, "KubeletReady", "vkpy is posting ready status")

    async def register(self) -> None:
        health = await self._health()
        info, resources = self._provider.node_info(), self._provider.node_resources()
        body = node_object(self._settings, info, resources, health, utcnow(self._clock))
        delay = 1.0
        exists = False
        while True:
            try:
                if exists:
                    node = await self._adopt(body)
                else:
                    node = await self._client.create("/api/v1/nodes", body)
                    log.info("node registered", extra={"node": self._settings.name})
                break
            except ApiError as error:
                if error.conflict and not exists:
                    exists = True  # adopt it, at once
                    continue
                if error.not_found and exists:
                    exists = False  # deleted while we were adopting it: create it
                elif not (error.retryable or error.conflict):
                    raise
                # a 409 while adopting: the node lifecycle controller wrote it first
                log.warning("node registration failed, retrying", extra={"error": str(error)})
                await self._clock.sleep(delay)
                delay = min(delay * 2, 30)
        self.uid = uid_of(node)
        self.adopted = exists
        self._conditions = packed_json.pack(conditions_of(node))
        self._tell_pod_cidrs(node)
        self.registered.set()
        self._events.emit(self._involved(), NORMAL, "RegisteredNode", "vkpy node registered")
        if not exists:
            # Created with its status, which the API server keeps for a Node (as the
            # kubelet registers): no second write. 5000 nodes registering made 5000
            # status patches more of a loaded API server (issue 30).
            self._sent(_digest(comparable(body["status"])), (health, info, resources))
            return
        try:
            await self.sync(force=True)
        except ApiError as error:
            if not (error.retryable or error.conflict):
                raise
            # the next check writes it (nothing sent yet counts as a change): a slow
            # API server must not end a node, or a node set's process, here
            self.api_error = str(error)
            log.warning("first node status not written, retrying", extra={"error": str(error)})

    async def _adopt(self, body: KubeObject) -> KubeObject:
        """Merge our labels and taints into an existing Node (read just before, so a
        conflict means someone wrote it in between: the caller reads and tries again)."""
        current = await self._client.get(self._path)
        ours = {t["key"]: t for t in spec(body).get("taints") or []}
        taints = [t for t in spec(current).get("taints") or [] if t.get("key") not in ours] + list(
            ours.values()
        )
        patch = {
            "metadata": {
                "labels": labels(self._settings, self._provider.node_info()),
                "resourceVersion": meta(current).get("resourceVersion"),
            },
            "spec": {"taints": taints},
        }
        node = await self._client.patch(self._path, patch, content_type=MERGE_PATCH)
        log.info("adopted existing node", extra={"node": self._settings.name})
        return node

    async def sync(self, force: bool = False) -> None:
        """Patch the status if it changed or the heartbeat is due. The status is built
        only if what it is built from (the backend's health, info and resources) changed
        since it was last sent, or the heartbeat is due: 1000 nodes check 100 times a
        second, and building and comparing it was a tenth of their steady CPU."""
        health = await self._health()
        info, resources = self._provider.node_info(), self._provider.node_resources()
        sources = (health, info, resources)
        due = self._clock.monotonic() - self._last_sent_at >= self._settings.status_interval
        due = due or self._resend
        if not (force or due) and sources == self._sent_sources:
            return
        desired = node_status(
            self._settings,
            info,
            resources,
            health,
            utcnow(self._clock),
            packed_json.unpack(self._conditions),
        )
        compared = comparable(desired)
        key = _digest(compared)
        changed = self._last_sent is None or key != self._last_sent
        if not (force or changed or due):
            self._sent_sources = sources  # the same status from other sources
            return
        if changed and self._last_sent is not None:
            ready = compared["conditions"][0]
            self._events.emit(
                self._involved(),
                NORMAL if health.ready else WARNING,
                "NodeReady" if health.ready else "NodeNotReady",
                f"Node {self._settings.name} status is now: {ready['reason']}",
            )
        node = await self._client.patch(self._path + "/status", {"status": desired})
        self._conditions = packed_json.pack(conditions_of(node))
        self._tell_pod_cidrs(node)
        self._sent(key, sources)

    def _sent(self, key: bytes, sources: tuple[Health, NodeInfo, NodeResources]) -> None:
        """Remember the status the API server now holds (its digest, `_digest`)."""
        self._last_sent = key
        self._sent_sources = sources
        self._last_sent_at = self._clock.monotonic()
        self._resend = False

    def resend(self) -> None:
        """Write the status at the next check, changed or not (what the server holds
        may have been changed by someone else, unseen)."""
        if self._last_sent is not None:
            self._resend = True

    def observed(self, node: KubeObject) -> None:
        """The Node as the API server holds it now (a watch event, vkpy.node.heartbeat.
        node_watch). When its conditions' statuses are not the ones last written here,
        someone else changed them: the node lifecycle controller marks a node Unknown
        when its Lease came late, and only the node itself sets Ready again. The kubelet
        compares its Node on the server with its own status every 10 s and writes on a
        difference; without this a node set's node stayed NotReady (and tainted
        unreachable) until its next 5-minute heartbeat. The next check writes it."""
        if self._last_sent is None:
            return  # nothing written yet: the next check writes it anyway
        seen = conditions_of(node)
        if _statuses(seen) != _statuses(packed_json.unpack(self._conditions)):
            self._conditions = packed_json.pack(seen)  # their transition times
            self._resend = True

    def _tell_pod_cidrs(self, node: KubeObject) -> None:
        """Hand the Node's pod CIDRs to a backend that addresses pods from them."""
        if isinstance(self._provider, UsesPodCIDR):
            node_spec = spec(node)
            cidrs = node_spec.get("podCIDRs") or (
                [node_spec["podCIDR"]] if node_spec.get("podCIDR") else []
            )
            self._provider.set_pod_cidrs([str(c) for c in cidrs])

    def _involved(self) -> InvolvedObject:
        return InvolvedObject(kind="Node", name=self._settings.name, uid=self._settings.name)
