"""The kubelet's pod loop: run what is bound to this node, report what became of it.

The controller keeps a cache of this node's pods from a list+watch, and reconciles
each pod (by UID, one operation at a time per pod) whenever its object or its
backend state changes: create on first sight, apply spec changes the kubelet reacts
to, enforce activeDeadlineSeconds, stop and then delete (grace 0, UID precondition)
pods being deleted, remove from the backend what the API no longer has, and write
status as a minimal patch when, and only when, it changed. Terminal pods are never
restarted. A retryable failure comes back with backoff; a permanent one is written
on the pod (reason, message, Event) and the pod is left alone.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Awaitable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime

from vkpy import metrics
from vkpy.kube.client import ApiError, KubeClient
from vkpy.kube.events import NORMAL, WARNING, EventRecorder
from vkpy.kube.watch import Watcher, WatchOptions
from vkpy.node.deadline import DEADLINE_MESSAGE, deadline_at, deadline_exceeded, deadline_state
from vkpy.node.env import ConfigError
from vkpy.node.ephemeral import EphemeralContainers
from vkpy.node.keyed_queue import KeyedQueue, Retry
from vkpy.node.pod_config import build_pod_config, pod_ref
from vkpy.node.pod_reporting import PodReporter, pod_path
from vkpy.node.pod_status import (
    TERMINAL_PHASES,
)
from vkpy.node.volumes import TokenTracker, VolumeSource, has_token_volumes
from vkpy.objects import KubeObject, meta, spec, status
from vkpy.providers.base import (
    ContainerState,
    PodConfig,
    PodRef,
    PodState,
    Provider,
    PushesStatus,
    ReadsVolumeFiles,
    RefreshesVolumes,
)
from vkpy.providers.errors import (
    InvalidInputError,
    NotFoundError,
    ProviderError,
    RetryableError,
    UnsupportedError,
)

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class PodControllerSettings:
    node_name: str
    host_ip: str
    workers: int = 50
    """Pods reconciled at once."""
    poll_interval: float = 5.0
    """How often a backend that cannot push is asked for every pod's state."""
    config_retry_max: float = 10.0
    """Longest wait before a pod missing a ConfigMap or Secret is tried again."""
    default_grace_period: float = 30.0


def _newer(candidate: KubeObject, current: KubeObject | None) -> bool:
    if current is None:
        return True
    try:
        return int(meta(candidate)["resourceVersion"]) >= int(meta(current)["resourceVersion"])
    except (KeyError, ValueError):
        return True


class PodController:
    """Owns this node's pods. `run` lists, adopts, then keeps everything in step."""

    def __init__(
        self,
        client: KubeClient,
        provider: Provider,
        events: EventRecorder,
        objects: VolumeSource,
        settings: PodControllerSettings,
    ) -> None:
        self._client = client
        self._provider = provider
        self._events = events
        self._objects = objects
        self._settings = settings
        self._cache: dict[str, KubeObject] = {}
        self._refs: dict[str, PodRef] = {}
        self._created: set[str] = set()
        self._applied_images: dict[str, tuple[str, ...]] = {}
        self._final: dict[str, PodState] = {}
        self._report = PodReporter(client, events, settings.host_ip)
        self._warned: dict[str, set[str]] = {}
        self._token_refresh: dict[str, float] = {}
        """When each pod's projected service account tokens are due for renewal."""
        self._ephemeral = EphemeralContainers(provider, events, objects, settings.host_ip)
        self._queue = KeyedQueue(self._sync, settings.workers)
        self._watcher = Watcher(
            client,
            WatchOptions(path="/api/v1/pods", field_selector=f"spec.nodeName={settings.node_name}"),
            self,
        )
        self.ready = asyncio.Event()
        """Set once the first list is in and backend pods are adopted."""
        if isinstance(provider, PushesStatus):
            provider.on_status_change(self.notify)

    # --- inputs -------------------------------------------------------------------

    def notify(self, ref: PodRef) -> None:
        """The backend says this pod's state may have changed."""
        self._queue.add(ref.uid)

    def replace(self, items: list[KubeObject]) -> None:
        fresh = {str(meta(p).get("uid")): p for p in items}
        gone = set(self._cache) - set(fresh)
        self._cache = fresh
        for uid, pod in fresh.items():
            self._refs[uid] = pod_ref(pod)
        metrics.PODS.set(len(fresh))
        if self.ready.is_set():
            for uid in gone | set(fresh):
                self._queue.add(uid)

    def apply(self, event_type: str, obj: KubeObject) -> None:
        uid = str(meta(obj).get("uid"))
        if event_type == "DELETED":
            self._cache.pop(uid, None)
        elif _newer(obj, self._cache.get(uid)):
            self._cache[uid] = obj
            self._refs[uid] = pod_ref(obj)
        metrics.PODS.set(len(self._cache))
        if self.ready.is_set():
            self._queue.add(uid)

    # --- the loop -----------------------------------------------------------------

    async def run(self) -> None:
        async with asyncio.TaskGroup() as group:
            group.create_task(self._watcher.run(), name="pod-watch")
            await self._watcher.synced.wait()
            await self._adopt()
            self.ready.set()
            for uid in list(self._cache):
                self._queue.add(uid)
            group.create_task(self._queue.run(), name="pod-workers")
            if not isinstance(self._provider, PushesStatus):
                group.create_task(self._poll(), name="pod-status-poll")

    async def _adopt(self) -> None:
        """Take over what the backend already runs; mark what no pod owns for removal."""
        delay = 0.5
        while True:
            try:
                existing = await self._provider.list_pods()
                break
            except RetryableError as error:
                log.warning("backend list failed, retrying", extra={"error": str(error)})
                await asyncio.sleep(delay)
                delay = min(delay * 2, 10)
        orphans = 0
        for ref in existing:
            self._created.add(ref.uid)
            self._refs.setdefault(ref.uid, ref)
            if ref.uid not in self._cache:
                orphans += 1
                self._queue.add(ref.uid)
        log.info("adopted backend pods", extra={"pods": len(existing), "orphans": orphans})

    async def _poll(self) -> None:
        while True:
            await asyncio.sleep(self._settings.poll_interval)
            for uid in list(self._created):
                self._queue.add(uid)

    def pods(self) -> list[KubeObject]:
        """The node's pods as last seen (for the kubelet API's /pods)."""
        return list(self._cache.values())

    def find(self, namespace: str, name: str, uid: str | None = None) -> KubeObject | None:
        """The node's pod with this namespace and name (and uid, when given), if any."""
        for pod in self._cache.values():
            m = meta(pod)
            same = m.get("namespace") == namespace and m.get("name") == name
            if same and (uid is None or m.get("uid") == uid):
                return pod
        return None

    def idle(self) -> bool:
        return not self._queue.busy()

    # --- one pod ------------------------------------------------------------------

    async def _sync(self, uid: str) -> None:
        pod = self._cache.get(uid)
        if pod is None:
            await self._remove_orphan(uid)
            return
        ref = pod_ref(pod)
        if meta(pod).get("deletionTimestamp"):
            await self._terminate(pod, ref)
            return
        terminal = status(pod).get("phase") in TERMINAL_PHASES
        if uid not in self._created:
            if terminal:
                return
            if not await self._create(pod, ref):
                return
        else:
            await self._apply_spec_changes(pod, ref)
            if not terminal:
                await self._refresh_volumes(pod, ref)
        if not terminal:
            await self._ephemeral.sync(pod, ref)
        if terminal and uid not in self._final:
            return
        state = await self._current_state(pod, ref)
        if state is None:
            return
        state = self._ephemeral.status(pod, ref, state)
        await self._write_status(pod, state, sandbox_ready=True)

    async def _backend(self, operation: str, ref: PodRef, coro: Awaitable[None]) -> None:
        """Run a backend call with metrics, turning retryable errors into `Retry`."""
        started = time.monotonic()
        try:
            await coro
            metrics.POD_OPERATIONS.labels(operation, "ok").inc()
        except RetryableError as error:
            metrics.POD_OPERATIONS.labels(operation, "retry").inc()
            raise Retry(f"{operation} {ref}: {error}") from error
        except ProviderError:
            metrics.POD_OPERATIONS.labels(operation, "error").inc()
            raise
        finally:
            metrics.POD_OPERATION_DURATION.labels(operation).observe(time.monotonic() - started)

    async def _create(self, pod: KubeObject, ref: PodRef) -> bool:
        """Start the pod in the backend; False when it cannot be (status already written)."""
        try:
            config = await self._config(pod)
        except ConfigError as error:
            await self._config_error(pod, ref, str(error))
            return False
        try:
            await self._backend("create", ref, self._provider.create_pod(config))
        except (InvalidInputError, UnsupportedError) as error:
            await self._fail_permanently(pod, ref, error)
            return False
        self._created.add(ref.uid)
        self._applied_images[ref.uid] = _images(pod)
        self._queue.forget(ref.uid)
        self._schedule_deadline(pod, ref)
        log.info("pod created in backend", extra={"pod": str(ref), "uid": ref.uid})
        return True

    async def _config(self, pod: KubeObject) -> PodConfig:
        allocatable: Mapping[str, str] = self._provider.node_resources().allocatable
        tokens = TokenTracker(self._objects)
        config = await build_pod_config(
            pod,
            tokens,
            self._settings.host_ip,
            allocatable,
            with_volume_files=isinstance(self._provider, ReadsVolumeFiles),
        )
        if tokens.refresh_at is not None and isinstance(self._provider, RefreshesVolumes):
            self._renew_at(config.ref.uid, tokens.refresh_at.timestamp())
        return config

    def _renew_at(self, uid: str, when: float) -> None:
        self._token_refresh[uid] = when
        self._queue.add_after(uid, max(0.0, when - time.time()) + 0.05)

    async def _refresh_volumes(self, pod: KubeObject, ref: PodRef) -> None:
        """Renew projected service account tokens (and so the volumes) before they expire.

        Pods adopted after a restart have no known renewal time: they are renewed once
        at their first sync, which also learns the next time."""
        if not isinstance(self._provider, RefreshesVolumes):
            return
        due = self._token_refresh.get(ref.uid)
        if due is None:
            if not has_token_volumes(pod):
                return
            due = 0.0
        if time.time() < due:
            return
        try:
            config = await self._config(pod)
            await self._backend("refresh", ref, self._provider.refresh_volumes(config))
        except (ConfigError, ApiError, ProviderError, Retry) as error:
            log.warning(
                "volume refresh failed, will retry",
                extra={"pod": str(ref), "uid": ref.uid, "error": str(error)},
            )
            self._renew_at(ref.uid, time.time() + 10.0)
            return
        log.info("pod volumes refreshed", extra={"pod": str(ref), "uid": ref.uid})

    async def _config_error(self, pod: KubeObject, ref: PodRef, message: str) -> None:
        """Pending with CreateContainerConfigError, an Event, and a retry."""
        waiting = tuple(
            ContainerState(
                name=str(c.get("name")),
                state="waiting",
                reason="CreateContainerConfigError",
                message=message,
            )
            for c in spec(pod).get("containers") or []
        )
        await self._write_status(pod, PodState(phase="Pending", containers=waiting), False)
        self._report.event(pod, WARNING, "Failed", f"Error: {message}")
        delay = self._queue.retry_later(ref.uid)
        log.info(
            "pod waits for its configuration",
            extra={"pod": str(ref), "error": message, "retry_in": round(delay, 2)},
        )

    async def _fail_permanently(self, pod: KubeObject, ref: PodRef, error: ProviderError) -> None:
        message = str(error)
        log.warning(
            "backend cannot run pod",
            extra={"pod": str(ref), "reason": error.reason, "error": message},
        )
        self._report.event(pod, WARNING, error.reason, message)
        state = PodState(
            phase="Failed",
            reason=error.reason,
            message=message,
            containers=tuple(
                ContainerState(
                    name=str(c.get("name")),
                    state="waiting",
                    reason="ContainerCannotRun"
                    if isinstance(error, InvalidInputError)
                    else error.reason,
                    message=message,
                )
                for c in spec(pod).get("containers") or []
            ),
        )
        self._final[ref.uid] = state
        await self._write_status(pod, state, sandbox_ready=False)

    async def _apply_spec_changes(self, pod: KubeObject, ref: PodRef) -> None:
        images = _images(pod)
        if self._applied_images.get(ref.uid, images) != images:
            try:
                config = await self._config(pod)
                await self._backend("update", ref, self._provider.update_pod(config))
                self._report.event(pod, NORMAL, "Updated", "Applied the changed container images")
            except (UnsupportedError, InvalidInputError, ConfigError) as error:
                self._report.event(pod, WARNING, "FailedUpdate", str(error))
        self._applied_images[ref.uid] = images
        self._schedule_deadline(pod, ref)

    def _schedule_deadline(self, pod: KubeObject, ref: PodRef) -> None:
        at = deadline_at(pod)
        if at is not None:
            self._queue.add_after(ref.uid, max(0.0, at - time.time()) + 0.05)

    async def _current_state(self, pod: KubeObject, ref: PodRef) -> PodState | None:
        final = self._final.get(ref.uid)
        if final is not None:
            return final
        try:
            state = await self._get_status(ref)
        except NotFoundError:
            log.warning("backend lost the pod, creating it again", extra={"pod": str(ref)})
            self._created.discard(ref.uid)
            self._queue.add(ref.uid)
            return None
        self._report_warnings(pod, ref, state.warnings)
        if deadline_exceeded(pod, state, time.time()):
            return await self._enforce_deadline(pod, ref, state)
        return state

    def _report_warnings(self, pod: KubeObject, ref: PodRef, warnings: tuple[str, ...]) -> None:
        """Each backend warning becomes one Warning Event on the pod, once."""
        seen = self._warned.setdefault(ref.uid, set())
        for warning in warnings:
            if warning not in seen:
                seen.add(warning)
                self._report.event(pod, WARNING, "BackendAdjusted", warning)

    async def _get_status(self, ref: PodRef) -> PodState:
        try:
            state = await self._provider.get_pod_status(ref)
        except RetryableError as error:
            metrics.POD_OPERATIONS.labels("status", "retry").inc()
            raise Retry(f"status {ref}: {error}") from error
        metrics.POD_OPERATIONS.labels("status", "ok").inc()
        return state

    async def _enforce_deadline(self, pod: KubeObject, ref: PodRef, state: PodState) -> PodState:
        self._report.event(pod, NORMAL, "DeadlineExceeded", DEADLINE_MESSAGE)
        await self._stop(ref, self._grace_period(pod))
        final = deadline_state(state, datetime.now(UTC))
        self._final[ref.uid] = final
        return final

    def _grace_period(self, pod: KubeObject) -> float:
        value = meta(pod).get("deletionGracePeriodSeconds")
        if value is None:
            value = spec(pod).get("terminationGracePeriodSeconds")
        return float(self._settings.default_grace_period if value is None else value)

    async def _terminate(self, pod: KubeObject, ref: PodRef) -> None:
        """Graceful deletion: stop in the backend, then remove the object for good."""
        if ref.uid in self._created:
            grace = self._grace_period(pod)
            for container in spec(pod).get("containers") or []:
                self._report.event(
                    pod,
                    NORMAL,
                    "Killing",
                    f"Stopping container {container.get('name')}",
                    container.get("name"),
                )
            await self._stop(ref, grace)
        try:
            await self._client.delete(
                pod_path(ref), {"gracePeriodSeconds": 0, "preconditions": {"uid": ref.uid}}
            )
            log.info("pod deleted", extra={"pod": str(ref), "uid": ref.uid})
        except ApiError as error:
            if not (error.not_found or error.conflict):
                raise Retry(f"delete {ref}: {error}") from error
        self._forget(ref.uid)

    async def _remove_orphan(self, uid: str) -> None:
        ref = self._refs.get(uid)
        if uid in self._created and ref is not None:
            log.info("removing pod the API no longer has", extra={"pod": str(ref), "uid": uid})
            await self._stop(ref, 0)
        self._created.discard(uid)
        self._forget(uid)

    async def _stop(self, ref: PodRef, grace: float) -> None:
        """Stop and forget the pod in the backend (gone already is fine)."""
        with contextlib.suppress(NotFoundError):
            await self._backend("delete", ref, self._provider.delete_pod(ref, grace))
        self._created.discard(ref.uid)

    def _forget(self, uid: str) -> None:
        for table in (
            self._applied_images,
            self._final,
            self._token_refresh,
            self._warned,
        ):
            table.pop(uid, None)
        self._queue.forget(uid)
        self._report.forget(uid)
        self._ephemeral.forget(uid)
        if uid not in self._cache:
            self._refs.pop(uid, None)

    async def _write_status(self, pod: KubeObject, state: PodState, sandbox_ready: bool) -> None:
        updated = await self._report.write_status(pod, state, sandbox_ready)
        uid = str(meta(pod).get("uid"))
        if updated is not None and uid in self._cache and _newer(updated, self._cache[uid]):
            self._cache[uid] = updated


def _images(pod: KubeObject) -> tuple[str, ...]:
    return tuple(str(c.get("image", "")) for c in spec(pod).get("containers") or [])
