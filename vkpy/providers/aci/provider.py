"""The `aci` backend: pods as Azure Container Instances container groups.

create PUTs the pod's group (`group_spec`) and returns once ARM accepted it; the
deployment's long-running operation is followed through its SDK poller by a
supervised background task (`aci-deployments`), never in the pod's worker, and its
outcome (ACI's error code and message when it failed) lands on the pod. A monitor,
run the same way, lists the node's groups once per `poll_interval` (one call for all
of them) and reads a group's instance view only when the list shows it changed,
while it is not steady, or every `refresh_interval`.
It tells the pod controller which pods changed (so this backend pushes status) and
turns ACI's events into pod Events. ACI restarts containers by the group's policy
itself. Logs, exec, attach and stats live in their own modules.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from typing import TypeVar

from azure.core.polling import AsyncLROPoller
from azure.mgmt.containerinstance import models as m

from vkpy.providers import owner_tags
from vkpy.providers.aci import group_spec, logs, metrics, naming, status, terminal
from vkpy.providers.aci.clients import AzureClients, provider_error
from vkpy.providers.aci.config import AciConfig
from vkpy.providers.aci.records import GroupRecord
from vkpy.providers.base import (
    BackgroundTask,
    EventCallback,
    LogQuery,
    LogRecord,
    NodeInfo,
    NodeResources,
    PodConfig,
    PodEvent,
    PodRef,
    PodState,
    PodStats,
    StatusCallback,
    StreamIO,
)
from vkpy.providers.errors import NotFoundError, ProviderError, RetryableError

log = logging.getLogger(__name__)
logging.getLogger("azure.core.pipeline.policies.http_logging_policy").setLevel(logging.WARNING)
"""The SDK logs every request and response at INFO: far too much for a node's log."""
T = TypeVar("T")
API_VERSION = "2023-05-01"
FETCH_CONCURRENCY = 8
REDEPLOY_FIRST = 1.0
REDEPLOY_MAX = 60.0
"""Back-off (seconds) between deployments of a group that failed for want of capacity
or quota after ARM accepted it (doubling; ARM's Retry-After when it gave one)."""
CAPACITY_CODES = frozenset(
    {"ServiceUnavailable", "ContainerGroupQuotaReached", "InternalServerError", "TooManyRequests"}
)
"""Codes of an accepted deployment's failure that a later deployment may not meet:
the group is deployed again. Any other code, but an image pull's (PULL_CODES), fails
the pod for good."""
PULL_CODES = frozenset({"InaccessibleImage", "RegistryErrorResponse"})
"""Codes of an accepted deployment that could not pull an image: as with the
kubelet, the pod is not Failed (its ReplicaSet would replace it at once, again and
again) but stays Pending, its containers `ErrImagePull` with ACI's code and words,
and the group is deployed again after the kubelet's image back-off."""
PULL_REASON = "ErrImagePull"
PULL_FIRST = 10.0
PULL_MAX = 300.0
"""The image pull back-off (seconds): 10 doubling to 5 min, as the kubelet's."""


class AciProvider:
    """Pods as ACI container groups. See the module docstring."""

    name = "aci"
    reads_volume_files = True
    reads_pull_secrets = True

    def __init__(
        self,
        config: AciConfig,
        node_name: str,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._config = config
        self._node = node_name
        self._clock = clock
        self._clients: AzureClients | None = None
        self._records: dict[str, GroupRecord] = {}
        self._on_status: StatusCallback | None = None
        self._on_event: EventCallback | None = None
        self._listed_at: float | None = None
        self._list_error: str | None = None
        self._stats = metrics.StatsCache(clock)
        self._deployments: asyncio.Queue[
            tuple[GroupRecord, AsyncLROPoller[m.ContainerGroup] | None]
        ] = asyncio.Queue()
        """Accepted deployments to follow (with their poller), and refused ones to
        deploy again (None)."""

    # --- wiring -----------------------------------------------------------------------

    def on_status_change(self, callback: StatusCallback) -> None:
        self._on_status = callback

    def on_event(self, callback: EventCallback) -> None:
        self._on_event = callback

    @property
    def clients(self) -> AzureClients:
        if self._clients is None:
            raise ProviderError("the aci backend is not started")
        return self._clients

    async def start(self) -> None:
        self._clients = AzureClients(self._config)

    async def close(self) -> None:
        if self._clients is not None:
            await self._clients.close()

    def background_tasks(self) -> Sequence[BackgroundTask]:
        return (
            BackgroundTask("aci-monitor", self._watch),
            BackgroundTask("aci-deployments", self._follow_deployments),
        )

    def node_info(self) -> NodeInfo:
        return NodeInfo(
            operating_system=self._config.os_type.lower(),
            architecture="amd64",
            runtime_name="aci",
            runtime_version=API_VERSION,
            os_image=f"Azure Container Instances ({self._config.region}, {self._config.os_type})",
        )

    def node_resources(self) -> NodeResources:
        capacity = dict(self._config.capacity)
        if self._config.gpu_capacity:
            capacity["nvidia.com/gpu"] = str(self._config.gpu_capacity)
        return NodeResources(capacity=capacity, allocatable=dict(capacity))

    async def ping(self) -> None:
        """Healthy while the monitor's lists succeed (a list of its own before the first)."""
        if self._listed_at is None:
            await self._list()
            return
        stale = self._clock() - self._listed_at > 3 * self._config.poll_interval + 30
        if stale and self._list_error:
            raise ProviderError(f"cannot list container groups: {self._list_error}")

    async def _call(self, what: str, call: Awaitable[T]) -> T:
        try:
            return await call
        except Exception as error:
            raise provider_error(error, what) from error

    def _notify(self, ref: PodRef) -> None:
        if self._on_status is not None:
            self._on_status(ref)

    # --- pods -------------------------------------------------------------------------

    async def create_pod(self, pod: PodConfig) -> None:
        spec = group_spec.build(pod, self._config, self._node)
        record = self._records.get(pod.ref.uid)
        if record is not None and record.digest == spec.digest and not record.gone:
            return
        try:
            await self._put(pod.ref, spec)
        except RetryableError as error:
            if not _capacity(error):
                raise
            self._refused(pod.ref, spec, error)

    def _refused(self, ref: PodRef, spec: group_spec.GroupSpec, error: RetryableError) -> None:
        """ARM refused the group's PUT for want of capacity or quota (after the SDK's
        own retries): the pod stays Pending with the platform's words, and the group
        is deployed again with back-off, as after a deployment that failed for it."""
        record = GroupRecord(
            ref=ref,
            name=spec.name,
            digest=spec.digest,
            notes=spec.notes,
            group=spec.group,
            created_at=self._clock(),
            spec=spec,
            accepted=False,
        )
        old = self._records.get(ref.uid)
        if old is not None:
            record.events_seen = old.events_seen
        self._records[ref.uid] = record
        self._failed(record, error)
        self._observe(record)
        self._deployments.put_nowait((record, None))

    async def _put(self, ref: PodRef, spec: group_spec.GroupSpec) -> None:
        rg = self._config.resource_group
        poller = await self._call(
            f"creating container group {spec.name}",
            self.clients.aci.container_groups.begin_create_or_update(rg, spec.name, spec.group),
        )
        group = poller.polling_method().resource()  # the PUT's answer
        record = GroupRecord(
            ref=ref,
            name=spec.name,
            digest=spec.digest,
            notes=spec.notes,
            group=group,
            created_at=self._clock(),
            spec=spec,
        )
        old = self._records.get(ref.uid)
        if old is not None:
            record.events_seen = old.events_seen
            if old.digest == spec.digest:
                record.attempts = old.attempts + 1
        self._records[ref.uid] = record
        self._deployments.put_nowait((record, poller))
        log.info("container group created", extra={"pod": str(ref), "group": spec.name})

    async def update_pod(self, pod: PodConfig) -> None:
        record = self._records.get(pod.ref.uid)
        if record is None:
            raise NotFoundError(f"no container group for pod {pod.ref}")
        spec = group_spec.build(pod, self._config, self._node)
        if spec.digest != record.digest:
            async with record.lock:
                await self._put(pod.ref, spec)  # ACI redeploys the group with the new spec

    async def delete_pod(self, ref: PodRef, grace_period: float) -> None:
        record = self._records.get(ref.uid)
        name = record.name if record is not None else naming.group_name(ref)
        if record is not None:
            record.deleting = True
            if record.follower is not None:
                record.follower.cancel()  # its operation ends with the group
        try:
            poller = await self._call(
                f"deleting container group {name}",
                self.clients.aci.container_groups.begin_delete(self._config.resource_group, name),
            )
            await self._call(f"deleting container group {name}", poller.result())
        except NotFoundError:
            pass
        except ProviderError:
            if record is not None:
                record.deleting = False
            raise
        self._records.pop(ref.uid, None)
        self._stats.forget(ref)
        log.info("container group deleted", extra={"pod": str(ref), "group": name})

    async def get_pod_status(self, ref: PodRef) -> PodState:
        record = self._records.get(ref.uid)
        if record is None or record.gone:
            raise NotFoundError(f"no container group for pod {ref}")
        if record.fetched_at == 0.0 and record.accepted:
            await self._fetch(record)
            if record.gone:
                raise NotFoundError(f"ACI no longer has the container group of pod {ref}")
        return self._state(record)

    def _state(self, record: GroupRecord) -> PodState:
        assert record.group is not None
        note = "; ".join(record.notes) or None
        state = status.pod_state(record.group, note)
        failure = record.failure
        deploying = record.follower is not None and not record.follower.done() and failure is None
        if not record.accepted and _capacity(failure):
            assert failure is not None
            return self._with_notes(record, status.retrying(state, failure.reason, _words(failure)))
        if deploying and state.phase == "Failed" and state.reason == "ProviderFailed":
            # the deployment's operation is about to say why: wait for its words
            return status.pod_state(_deploying(record.group), note)
        if failure is not None and state.phase == "Failed" and state.reason == "ProviderFailed":
            if _capacity(failure):  # deployed again (see _redeploy)
                state = status.retrying(state, failure.reason, _words(failure))
            elif _pull(failure):  # deployed again after the image back-off
                state = status.retrying(state, PULL_REASON, f"{failure.reason}: {_words(failure)}")
            else:
                state = status.failed(state, failure.reason, _words(failure))
        return self._with_notes(record, state)

    @staticmethod
    def _with_notes(record: GroupRecord, state: PodState) -> PodState:
        """`state` with the mapping's notes as warnings (each one Warning Event)."""
        return dataclasses.replace(state, warnings=record.notes) if record.notes else state

    async def list_pods(self) -> Sequence[PodRef]:
        for group in await self._list():
            ref = owner_tags.owner(group.tags, self._node)
            if ref is None or ref.uid in self._records:
                continue
            self._records[ref.uid] = GroupRecord(
                ref=ref,
                name=str(group.name),
                digest=(group.tags or {}).get(group_spec.SPEC_TAG, ""),
                group=group,
                created_at=self._clock(),
            )
        log.info("container groups of this node", extra={"pods": len(self._records)})
        return [r.ref for r in self._records.values()]

    async def _list(self) -> list[m.ContainerGroup]:
        async def collect() -> list[m.ContainerGroup]:
            pages = self.clients.aci.container_groups.list_by_resource_group(
                self._config.resource_group
            )
            return [g async for g in pages]

        try:
            groups = await self._call("listing container groups", collect())
        except ProviderError as error:
            self._list_error = str(error)
            raise
        self._listed_at = self._clock()
        self._list_error = None
        return groups

    async def _fetch(self, record: GroupRecord) -> None:
        try:
            group = await self._call(
                f"reading container group {record.name}",
                self.clients.aci.container_groups.get(self._config.resource_group, record.name),
            )
        except NotFoundError:
            record.gone = True
            return
        record.group = group
        record.fetched_at = self._clock()

    # --- deployments ------------------------------------------------------------------

    async def _follow_deployments(self) -> None:
        """Follow each accepted deployment's operation to its end, many at a time."""
        async with asyncio.TaskGroup() as group:
            while True:
                record, poller = await self._deployments.get()
                if record.deleting:
                    continue
                if poller is not None:
                    work = self._follow(record, poller)
                else:
                    assert isinstance(record.failure, RetryableError)
                    work = self._redeploy(record, record.failure)
                record.follower = group.create_task(work, name=f"deploy {record.name}")

    async def _follow(self, record: GroupRecord, poller: AsyncLROPoller[m.ContainerGroup]) -> None:
        try:
            await poller.result()
        except Exception as error:
            failure = provider_error(error, "deploying the container group")
            if isinstance(failure, NotFoundError) or record.deleting:
                return
            self._failed(record, failure)
        if self._records.get(record.ref.uid) is not record or record.deleting:
            return
        await self._fetch(record)
        self._observe(record)
        ended = record.failure
        if ended is not None and (_capacity(ended) or _pull(ended)) and record.spec:
            await self._redeploy(record, ended)

    def _failed(self, record: GroupRecord, failure: ProviderError) -> None:
        """A deployment failed (or its PUT was refused): remembered, logged, and one
        Warning Event with the platform's words."""
        record.failure = failure
        log.warning(
            "deployment failed",
            extra={"pod": str(record.ref), "reason": failure.reason, "error": str(failure)},
        )
        if self._on_event is not None:
            self._on_event(record.ref, PodEvent("Warning", failure.reason, _words(failure)))

    async def _redeploy(self, record: GroupRecord, failure: ProviderError) -> None:
        """Deploy a group again after ACI ran out of capacity or quota for it, or could
        not pull its image (after the image back-off), backing off, until a deployment
        is accepted (its operation is then followed anew) or the pod goes; the
        platform's message stays on the pod meanwhile (its Event was recorded when the
        deployment failed)."""
        assert record.spec is not None
        if _pull(failure):
            delay = min(PULL_FIRST * 2 ** (record.attempts - 1), PULL_MAX)
        else:
            hint = failure.retry_after if isinstance(failure, RetryableError) else None
            delay = hint or min(REDEPLOY_FIRST * 2 ** (record.attempts - 1), REDEPLOY_MAX)
        while True:
            log.info(
                "deploying the container group again",
                extra={"pod": str(record.ref), "after": delay, "attempt": record.attempts + 1},
            )
            await asyncio.sleep(delay)
            if self._records.get(record.ref.uid) is not record or record.deleting:
                return
            try:
                await self._put(record.ref, record.spec)
                return
            except RetryableError as error:
                if _capacity(error):  # refused again: the pod says so
                    self._failed(record, error)
                    self._observe(record)
                delay = error.retry_after or min(delay * 2, REDEPLOY_MAX)
            except ProviderError as error:
                record.failure = error
                self._observe(record)
                return

    # --- the monitor ------------------------------------------------------------------

    async def _watch(self) -> None:
        """List the node's groups every poll_interval; a transient error is logged and
        the next round tried; anything else ends the task, which is restarted."""
        while True:
            await asyncio.sleep(self._config.poll_interval)
            try:
                await self.refresh()
            except ProviderError as error:
                log.warning("listing container groups failed", extra={"error": str(error)})

    async def refresh(self) -> None:
        """One round of the monitor (see the module docstring)."""
        listed = {str(g.name): g for g in await self._list()}
        now = self._clock()
        due: list[GroupRecord] = []
        for record in list(self._records.values()):
            if record.deleting or record.gone or not record.accepted:
                continue  # (a refused group is deployed again by its own task)
            seen = listed.get(record.name)
            last = record.group
            if (
                seen is None
                or record.fetched_at == 0.0
                or last is None
                or seen.provisioning_state != last.provisioning_state
                or not status.steady(last)
                or now - record.fetched_at >= self._config.refresh_interval
            ):
                due.append(record)
        limit = asyncio.Semaphore(FETCH_CONCURRENCY)

        async def fetch(record: GroupRecord) -> None:
            async with limit:
                try:
                    await self._fetch(record)
                except ProviderError as error:
                    log.warning(
                        "reading a container group failed",
                        extra={"pod": str(record.ref), "error": str(error)},
                    )
                    return
            self._observe(record)

        async with asyncio.TaskGroup() as group:
            for record in due:
                group.create_task(fetch(record))

    def _observe(self, record: GroupRecord) -> None:
        if record.gone:
            log.warning("container group is gone", extra={"pod": str(record.ref)})
            self._notify(record.ref)
            return
        if self._on_event is not None:
            for event in record.new_events():
                self._on_event(record.ref, event)
        state = self._state(record)
        if state != record.state:
            record.state = state
            self._notify(record.ref)

    # --- kubelet API hooks ------------------------------------------------------------

    def _record(self, ref: PodRef, container: str | None = None) -> GroupRecord:
        record = self._records.get(ref.uid)
        if record is None or record.gone:
            raise NotFoundError(f"no container group for pod {ref}")
        if container is not None and container not in record.container_names:
            raise NotFoundError(f"pod {ref} has no container {container!r}")
        return record

    async def container_logs(self, ref: PodRef, query: LogQuery) -> AsyncIterator[LogRecord]:
        record = self._record(ref, query.container)
        source = logs.LogSource(
            self.clients, self._config, record.name, query.container, self._running(record)
        )
        async for line in logs.read(source, query, self._config.log_poll_interval):
            yield line

    def _running(self, record: GroupRecord) -> Callable[[str], bool]:
        def running(container: str) -> bool:
            if record.deleting or record.gone or record.ref.uid not in self._records:
                return False
            state = self._state(record) if record.group is not None else None
            if state is None:
                return False
            for c in (*state.containers, *state.init_containers):
                if c.name == container:
                    return c.state != "terminated"
            return False

        return running

    async def exec_in_container(
        self, ref: PodRef, container: str, command: Sequence[str], io: StreamIO
    ) -> int:
        record = self._record(ref, container)
        return await terminal.exec_command(
            self.clients, self._config, record.name, container, command, io
        )

    async def attach_to_container(self, ref: PodRef, container: str, io: StreamIO) -> int | None:
        record = self._record(ref, container)
        return await terminal.attach(self.clients, self._config, record.name, container, io)

    async def pod_stats(self) -> Sequence[PodStats]:
        running = [
            r
            for r in self._records.values()
            if not r.deleting and not r.gone and r.state is not None and r.state.phase == "Running"
        ]
        return await self._stats.sample(self.clients, self._config, running)


def _capacity(failure: ProviderError | None) -> bool:
    """Whether a deployment failed for want of capacity or quota (see CAPACITY_CODES)."""
    return isinstance(failure, RetryableError) and failure.reason in CAPACITY_CODES


def _pull(failure: ProviderError | None) -> bool:
    """Whether a deployment failed to pull an image (see PULL_CODES)."""
    return failure is not None and failure.reason in PULL_CODES


def _words(failure: ProviderError) -> str:
    """The platform's message of a failed deployment: its code and words, without
    what vkpy was doing ("deploying the container group: ", "creating ...: ")."""
    return str(failure).split(": ", 1)[-1]


def _deploying(group: m.ContainerGroup) -> m.ContainerGroup:
    """The group as it was while its deployment ran (for a status that waits on the
    deployment's outcome)."""
    body = group.serialize(keep_readonly=True)
    body.setdefault("properties", {})["provisioningState"] = "Creating"
    copy: m.ContainerGroup = m.ContainerGroup.deserialize(body)
    return copy
