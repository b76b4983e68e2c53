"""Kubernetes Events for pods and the Node, deduplicated and rate limited.

Events are how a user sees, in `kubectl describe`, why a pod is not running. They are
also the easiest way to flood an API server, so like the kubelet's recorder this one
sends from a background task (emitting never blocks pod work), folds a repeat of the
same event into a count on the existing object, and drops what exceeds a token bucket
(counted in `vkpy_events_total{outcome="dropped"}`).
"""

from __future__ import annotations

import asyncio
import contextlib
import copy
import logging
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass

from vkpy.core import metrics
from vkpy.core.objects import KubeObject
from vkpy.core.rfc3339 import format_time
from vkpy.kube.client import MERGE_PATCH, ApiError, KubeClient

log = logging.getLogger(__name__)

NORMAL = "Normal"
WARNING = "Warning"


@dataclass(frozen=True)
class InvolvedObject:
    kind: str
    name: str
    namespace: str = ""
    uid: str = ""
    api_version: str = "v1"
    field_path: str = ""

    def as_dict(self) -> KubeObject:
        ref: KubeObject = {"kind": self.kind, "name": self.name, "apiVersion": self.api_version}
        if self.namespace:
            ref["namespace"] = self.namespace
        if self.uid:
            ref["uid"] = self.uid
        if self.field_path:
            ref["fieldPath"] = self.field_path
        return ref


@dataclass(frozen=True)
class _Pending:
    involved: InvolvedObject
    type: str
    reason: str
    message: str
    host: str
    at: float
    """When it happened (epoch s): it may be sent much later (ElasticGate)."""


class TokenBucket:
    """`rate` tokens per second up to `burst`; `take` says whether one was available."""

    def __init__(
        self, rate: float, burst: int, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self._rate = rate
        self._burst = burst
        self._tokens = float(burst)
        self._clock = clock
        self._last = clock()

    def take(self) -> bool:
        now = self._clock()
        self._tokens = min(self._burst, self._tokens + (now - self._last) * self._rate)
        self._last = now
        if self._tokens >= 1:
            self._tokens -= 1
            return True
        return False


class EventRecorder:
    """Queue events with `emit`; `run` sends them."""

    def __init__(
        self,
        client: KubeClient,
        host: str,
        component: str = "kubelet",
        qps: float = 50.0,
        burst: int = 100,
        queue_size: int = 10_000,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self._client = client
        self._host = host
        self._component = component
        self._clock = clock
        self._bucket = TokenBucket(qps, burst)
        self._queue: asyncio.Queue[_Pending] = asyncio.Queue(queue_size)
        self._recent: OrderedDict[tuple[str, ...], tuple[str, str, int]] = OrderedDict()

    def emit(self, involved: InvolvedObject, event_type: str, reason: str, message: str) -> None:
        """Queue an event; never blocks, drops (and counts) when the queue is full."""
        try:
            self._queue.put_nowait(
                _Pending(involved, event_type, reason, message[:1024], self._host, self._clock())
            )
        except asyncio.QueueFull:
            metrics.labelled(metrics.EVENTS, "dropped").inc()

    def for_host(self, host: str) -> EventRecorder:
        """A recorder for another node of this process that shares this one's queue,
        rate limit, aggregation and sender (only this one's `run` sends): many nodes,
        one recorder, each Event still naming the node it is about."""
        view = copy.copy(self)
        view._host = host
        return view

    async def run(self) -> None:
        while True:
            pending = await self._queue.get()
            if not self._bucket.take():
                metrics.labelled(metrics.EVENTS, "dropped").inc()
                continue
            try:
                await self._send(pending)
            except ApiError as error:
                metrics.labelled(metrics.EVENTS, "failed").inc()
                log.debug(
                    "event not written", extra={"reason": pending.reason, "error": str(error)}
                )

    async def flush(self, timeout: float = 5.0) -> None:
        """Send what is still queued, for at most `timeout` s (at shutdown, after `run`)."""
        with contextlib.suppress(TimeoutError, ApiError):
            async with asyncio.timeout(timeout):
                while not self._queue.empty():
                    pending = self._queue.get_nowait()
                    self._queue.task_done()
                    await self._send(pending)

    async def _send(self, pending: _Pending) -> None:
        inv = pending.involved
        key = (inv.uid or inv.name, inv.field_path, pending.type, pending.reason, pending.message)
        namespace = inv.namespace or "default"
        now = format_time(pending.at)
        seen = self._recent.get(key)
        if seen is not None:
            name, first, count = seen
            try:
                await self._client.patch(
                    f"/api/v1/namespaces/{namespace}/events/{name}",
                    {"count": count + 1, "lastTimestamp": now},
                    content_type=MERGE_PATCH,
                    decode=False,
                    background=True,
                )
                self._remember(key, (name, first, count + 1))
                metrics.labelled(metrics.EVENTS, "aggregated").inc()
                return
            except ApiError as error:
                if not error.not_found:
                    raise
        name = f"{inv.name}.{time.time_ns():x}"
        body: KubeObject = {
            "apiVersion": "v1",
            "kind": "Event",
            "metadata": {"name": name, "namespace": namespace},
            "involvedObject": inv.as_dict(),
            "reason": pending.reason,
            "message": pending.message,
            "type": pending.type,
            "source": {"component": self._component, "host": pending.host},
            "reportingComponent": self._component,
            "reportingInstance": pending.host,
            "firstTimestamp": now,
            "lastTimestamp": now,
            "count": 1,
        }
        # in the background: a pod's status goes first when both wait (ElasticGate)
        await self._client.create(
            f"/api/v1/namespaces/{namespace}/events", body, decode=False, background=True
        )
        self._remember(key, (name, now, 1))
        metrics.labelled(metrics.EVENTS, "sent").inc()

    def _remember(self, key: tuple[str, ...], value: tuple[str, str, int]) -> None:
        self._recent[key] = value
        self._recent.move_to_end(key)
        while len(self._recent) > 4096:
            self._recent.popitem(last=False)
