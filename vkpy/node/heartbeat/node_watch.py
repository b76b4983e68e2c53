"""The served Nodes as the API server holds them, so a node sees what others wrote.

The node lifecycle controller marks a node's conditions Unknown (and taints it
unreachable) when its Lease came later than the grace period, as on an API server
slowed by a burst. Only the node sets them again. The kubelet reads its Node every
10 s and writes its status when the server's differs from its own; 5,000 nodes
reading their Node every 10 s would cost the API server 500 GETs a second. Here one
watch serves all the host's nodes (field-selected on the name for one node, on the
set's label for a set) and hands each change to the node's NodeController
(`observed`), which writes its status at its next check (10 s).

Only changes are wanted: a set's whole list of Nodes is large (4 KiB each) and says
nothing a node does not know, so the watch starts from the current resourceVersion
(`WatchOptions.changes_only`). If it must relist (410 Gone) it may have missed a
change: every node writes its status once more at its next check.
"""

from __future__ import annotations

from collections.abc import Callable

from vkpy.core.clock import SYSTEM_CLOCK, Clock
from vkpy.core.objects import KubeObject, meta
from vkpy.kube.client import KubeClient
from vkpy.kube.watch import Watcher, WatchOptions
from vkpy.node.heartbeat.node_controller import NodeController


class NodeWatch:
    """Hands each change of a served Node to its controller; `run` until cancelled."""

    def __init__(
        self,
        client: KubeClient,
        served: Callable[[str], NodeController | None],
        every: Callable[[], list[NodeController]],
        *,
        name: str = "",
        label_selector: str = "",
        clock: Clock = SYSTEM_CLOCK,
    ) -> None:
        """`served(name)`: the controller of a node served here now, or None; `every()`:
        all of them. `name` (one node) or `label_selector` (a set) picks the Nodes."""
        self._served = served
        self._every = every
        self._listed = False
        self._watcher = Watcher(
            client,
            WatchOptions(
                path="/api/v1/nodes",
                field_selector=f"metadata.name={name}" if name else "",
                label_selector=label_selector,
                resource="nodes",
                changes_only=True,
            ),
            self,
            clock=clock,
        )

    async def run(self) -> None:
        await self._watcher.run()

    def replace(self, items: list[KubeObject]) -> None:
        """(Re)started from the current resourceVersion: after the first time, changes
        may have been missed, so every node writes its status at its next check."""
        if self._listed:
            for controller in self._every():
                controller.resend()
        self._listed = True

    def apply(self, event_type: str, obj: KubeObject) -> None:
        if event_type == "DELETED":
            return  # the node's own loops create it again
        controller = self._served(str(meta(obj).get("name", "")))
        if controller is not None:
            controller.observed(obj)
