"""One pod watch for every node of this process, routed to each node by spec.nodeName.

A process serving 1000 nodes must not open 1000 watches (the API server keeps a
watcher, a goroutine and a buffer for each, and every pod event is matched against
each field selector). A field selector cannot name a set of nodes, so this watches
every pod bound to some node (`spec.nodeName!=`, which the API server indexes) and
hands each list and event to the pod controller of the node it names; pods of nodes
that are not ours are dropped on arrival. A pod's nodeName never changes once set, so
routing by it is final.

When replicas share a node set (vkpy.fleet.sharded), a node's controller is attached when
this replica takes the node and detached when it gives it back, long after the first
list. For that the watch is told every node of the set (`keep`) and keeps their pods
(packed as JSON, as the pod records keep a settled pod), so a controller attached
late gets the node's pods as a complete list at once, then the events.
"""

from __future__ import annotations

import asyncio
from collections.abc import Collection, Iterable

from vkpy.core import packed_json
from vkpy.core.clock import SYSTEM_CLOCK, Clock
from vkpy.core.objects import KubeObject, node_name_of, uid_of
from vkpy.kube.client import KubeClient
from vkpy.kube.watch import Watcher, WatchHandler, WatchOptions

BOUND_PODS = "spec.nodeName!="
"""Every pod the scheduler (or a user) has bound to a node."""


class SharedPodWatch:
    """Lists and watches bound pods once; `attach` a node's handler before `run`."""

    def __init__(
        self,
        client: KubeClient,
        clock: Clock = SYSTEM_CLOCK,
        label_selector: str = "",
        keep: Collection[str] = (),
    ) -> None:
        """`keep`: the nodes whose pods are kept for controllers attached later."""
        self._handlers: dict[str, WatchHandler] = {}
        self._kept: dict[str, dict[str, bytes]] = {name: {} for name in keep}
        self._watcher = Watcher(
            client,
            WatchOptions(
                path="/api/v1/pods",
                field_selector=BOUND_PODS,
                label_selector=label_selector,
                stream_initial=True,
            ),
            self,
            clock=clock,
        )
        self.dropped = 0
        """Events about pods of nodes this process does not serve (counted, not kept)."""

    @property
    def synced(self) -> asyncio.Event:
        """Set once the first list has been handed out."""
        return self._watcher.synced

    def attach(self, node_name: str, handler: WatchHandler) -> None:
        self._handlers[node_name] = handler
        kept = self._kept.get(node_name)
        if kept is not None and self.synced.is_set():
            handler.replace([packed_json.unpack(packed) for packed in kept.values()])

    def detach(self, node_name: str) -> None:
        """Stop handing this node's pods to its controller (it is served elsewhere)."""
        self._handlers.pop(node_name, None)

    def nodes(self) -> Iterable[str]:
        return self._handlers.keys()

    async def run(self) -> None:
        await self._watcher.run()

    # --- WatchHandler -----------------------------------------------------------------

    def replace(self, items: list[KubeObject]) -> None:
        by_node: dict[str, list[KubeObject]] = {name: [] for name in self._handlers}
        for node_pods in self._kept.values():
            node_pods.clear()
        for pod in items:
            node = node_name_of(pod)
            kept = self._kept.get(node)
            if kept is not None:
                kept[uid_of(pod)] = packed_json.pack(pod)
            mine = by_node.get(node)
            if mine is None:
                self.dropped += kept is None
            else:
                mine.append(pod)
        for name, pods in by_node.items():
            self._handlers[name].replace(pods)

    def apply(self, event_type: str, obj: KubeObject) -> None:
        node = node_name_of(obj)
        kept = self._kept.get(node)
        if kept is not None:
            if event_type == "DELETED":
                kept.pop(uid_of(obj), None)
            else:
                kept[uid_of(obj)] = packed_json.pack(obj)
        handler = self._handlers.get(node)
        if handler is None:
            if kept is not None:
                return  # a node of the set that another replica serves now
            self.dropped += 1
            return
        handler.apply(event_type, obj)
