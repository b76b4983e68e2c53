"""The cluster's Services as a watch keeps them, for the pods' service-link variables.

Each container's environment needs its namespace's Services (`enableServiceLinks`,
service_env.py). A kubelet reads them from a watch-fed cache (its Service informer)
and waits for that cache's first list before it starts a pod. vkpy did a LIST per
burst instead (shared by the pods configured meanwhile): on a fresh cluster each LIST
took the API server 58-78 ms, and every pod of a 1000-pod burst waited for one of
~40 LISTs in a row (issue 30). Here one watch of every Service keeps what the
variables need (name, ClusterIP, ports), and a pod reads it without a request.

What a pod sees is what the kubelet's would: the Services the watch has brought so
far. The watch starts with the node host (`start`), as a kubelet's informer starts
with the kubelet: its first list, a consistent read, took 3.3 s on an API server busy
with a burst of creates, and the burst's first pods waited for it when the watch
started with the first pod that asked. A pod that asks before the first list waits
for it (a user of this class that does not `start` it starts it then). If the watch
cannot list within `first_list_wait` seconds (an API server that is down, or a
role without `watch` on Services, as the chart had before), pods get a LIST of their
namespace (`SharedLists`, one for the pods that ask at the same time) until the watch
has listed; a watch that has listed once keeps its Services through an outage, as an
informer does.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable

from vkpy.core.clock import SYSTEM_CLOCK, Clock
from vkpy.core.objects import KubeObject, meta, spec
from vkpy.kube.client import KubeClient
from vkpy.kube.watch import Watcher, WatchOptions
from vkpy.node.podspec.shared_lists import SharedLists

FIRST_LIST_WAIT = 5.0
"""Seconds a pod waits for the watch's first list before its namespace is listed."""


def _kept(service: KubeObject) -> KubeObject:
    """What the variables read of a Service, and nothing else (a Service's managed
    fields, annotations and status are most of it)."""
    m = meta(service)
    s = spec(service)
    return {
        "metadata": {"name": m.get("name"), "namespace": m.get("namespace")},
        "spec": {
            "clusterIP": s.get("clusterIP"),
            "ports": [
                {k: p[k] for k in ("name", "port", "protocol") if k in p}
                for p in s.get("ports") or []
            ],
        },
    }


class ServiceTable:
    """The watch's handler: every Service, by namespace and name, as `_kept`."""

    def __init__(self) -> None:
        self._by_namespace: dict[str, dict[str, KubeObject]] = {}

    def replace(self, items: list[KubeObject]) -> None:
        self._by_namespace = {}
        for item in items:
            self.apply("ADDED", item)

    def apply(self, event_type: str, obj: KubeObject) -> None:
        m = meta(obj)
        namespace, name = str(m.get("namespace", "")), str(m.get("name", ""))
        if event_type == "DELETED":
            services = self._by_namespace.get(namespace, {})
            services.pop(name, None)
            if not services:
                self._by_namespace.pop(namespace, None)
            return
        self._by_namespace.setdefault(namespace, {})[name] = _kept(obj)

    def services(self, namespace: str) -> list[KubeObject]:
        """The namespace's Services, by name (as a LIST orders them)."""
        services = self._by_namespace.get(namespace, {})
        return [services[name] for name in sorted(services)]


class ServiceCache:
    """`services(namespace)` from one watch of every Service; `close` ends the watch."""

    def __init__(
        self,
        client: KubeClient,
        list_namespace: Callable[[str], Awaitable[list[KubeObject]]],
        clock: Clock = SYSTEM_CLOCK,
        first_list_wait: float = FIRST_LIST_WAIT,
    ) -> None:
        self.table = ServiceTable()
        self._watcher = Watcher(
            client,
            WatchOptions(path="/api/v1/services", resource="services", stream_initial=True),
            self.table,
            clock,
        )
        self._lists = SharedLists(list_namespace)
        self._first_list_wait = first_list_wait
        self._task: asyncio.Task[None] | None = None
        self._waited = False
        """A pod has waited `first_list_wait` for the first list: the ones after it
        list their namespace at once until the watch has listed."""

    @property
    def synced(self) -> bool:
        return self._watcher.synced.is_set()

    def start(self) -> None:
        """Start the watch (once; `close` ends it)."""
        if self._task is None:
            self._task = asyncio.create_task(self._watcher.run(), name="service-watch")

    async def services(self, namespace: str) -> list[KubeObject]:
        self.start()
        if not self.synced and not self._waited:
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(self._first_list_wait):
                    await self._watcher.synced.wait()
            self._waited = True
        if self.synced:
            return self.table.services(namespace)
        return await self._lists.get(namespace)

    async def close(self) -> None:
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
