"""Who serves a host's nodes when nothing is shared: every node, at once or while leading.

A host (vkpy.fleet.host) runs any set of nodes the same way; its membership says
which of them this process serves and when. Two memberships need no more than that:

- static: every node of the set, from start to stop, each renewing its own Lease
  in kube-node-lease (one node alone is a static set of one);
- elected: the same, but only while this replica holds one leader Lease
  (vkpy.fleet.leader) among replicas started for the same node (or set): the
  standbys wait, every write goes through a client fenced by the Lease, losing it
  raises LeadershipLost (the process then exits and starts again as a standby), and
  stopping releases it so a standby takes over at once.

The third, a set shared by replicas with a Lease per node, is vkpy.fleet.sharded.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable

from vkpy.fleet.host import HostedNode, NodeHost, run_logged
from vkpy.fleet.leader import LeaderElector
from vkpy.kube.client import KubeClient
from vkpy.providers.base import Provider

log = logging.getLogger(__name__)


class Static:
    """Every node of the set, served from start to stop."""

    sharing = False

    def __init__(self) -> None:
        self.nodes: list[HostedNode] = []
        self._host: NodeHost | None = None

    @property
    def host(self) -> NodeHost:
        if self._host is None:
            raise RuntimeError("the membership is not attached to a host yet")
        return self._host

    @property
    def elector(self) -> LeaderElector | None:
        return None

    def fence(self, client: KubeClient) -> KubeClient:
        return client

    def attach(self, host: NodeHost) -> Provider:
        """Every node is built now (a bad backend setting fails before any work)."""
        self._host = host
        self.nodes = [host.build(member) for member in host.members]
        return self.nodes[0].provider

    async def lead(self, work: Callable[[], Awaitable[None]]) -> None:
        await work()

    async def serve(self) -> None:
        host = self.host
        async with asyncio.TaskGroup() as group:
            for node in self.nodes:
                name = f"node/{node.member.node.name}"
                group.create_task(run_logged(name, host.serve(node)), name=name)

    async def stop(self) -> None:
        """Nothing held: each node's Lease simply runs out."""


class Elected(Static):
    """The set (usually one node) served only while `elector` holds the leader Lease."""

    def __init__(self, elector: LeaderElector) -> None:
        super().__init__()
        self._elector = elector

    @property
    def elector(self) -> LeaderElector | None:
        return self._elector

    def fence(self, client: KubeClient) -> KubeClient:
        return client.fenced(self._elector.write_budget)

    async def lead(self, work: Callable[[], Awaitable[None]]) -> None:
        """Wait for the Lease, then run `work` while it is renewed; LeadershipLost
        when it is not renewed in time."""
        log.info(
            "waiting to lead",
            extra={"node": self.host.settings.node.name, "identity": self._elector.identity},
        )
        await self._elector.run(work)

    async def stop(self) -> None:
        """Release the leader Lease (if held) so a standby takes over at once."""
        await self._elector.release()
