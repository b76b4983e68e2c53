"""One pod watch for every node of this process, routed to each node by spec.nodeName.

A process serving 1000 nodes must not open 1000 watches (the API server keeps a
watcher, a goroutine and a buffer for each, and every pod event is matched against
each field selector). A field selector cannot name a set of nodes, so this watches
every pod bound to some node (`spec.nodeName!=`, which the API server indexes) and
hands each list and event to the pod controller of the node it names; pods of nodes
that are not ours are dropped on arrival. A pod's nodeName never changes once set, so
routing by it is final.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable

from vkpy.clock import SYSTEM_CLOCK, Clock
from vkpy.kube.client import KubeClient
from vkpy.kube.watch import Watcher, WatchHandler, WatchOptions
from vkpy.objects import KubeObject, spec

BOUND_PODS = "spec.nodeName!="
"""Every pod the scheduler (or a user) has bound to a node."""


class SharedPodWatch:
    """Lists and watches bound pods once; `attach` a node's handler before `run`."""

    def __init__(
        self, client: KubeClient, clock: Clock = SYSTEM_CLOCK, label_selector: str = ""
    ) -> None:
        self._handlers: dict[str, WatchHandler] = {}
        self._watcher = Watcher(
            client,
            WatchOptions(
                path="/api/v1/pods", field_selector=BOUND_PODS, label_selector=label_selector
            ),
            self,
            sleep=clock.sleep,
        )
        self.dropped = 0
        """Events about pods of nodes this process does not serve (counted, not kept)."""

    @property
    def synced(self) -> asyncio.Event:
        """Set once the first list has been handed out."""
        return self._watcher.synced

    def attach(self, node_name: str, handler: WatchHandler) -> None:
        self._handlers[node_name] = handler

    def nodes(self) -> Iterable[str]:
        return self._handlers.keys()

    async def run(self) -> None:
        await self._watcher.run()

    # --- WatchHandler -----------------------------------------------------------------

    def replace(self, items: list[KubeObject]) -> None:
        by_node: dict[str, list[KubeObject]] = {name: [] for name in self._handlers}
        for pod in items:
            mine = by_node.get(str(spec(pod).get("nodeName") or ""))
            if mine is None:
                self.dropped += 1
            else:
                mine.append(pod)
        for name, pods in by_node.items():
            self._handlers[name].replace(pods)

    def apply(self, event_type: str, obj: KubeObject) -> None:
        handler = self._handlers.get(str(spec(obj).get("nodeName") or ""))
        if handler is None:
            self.dropped += 1
            return
        handler.apply(event_type, obj)
