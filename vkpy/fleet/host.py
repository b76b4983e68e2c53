"""The one host of vkpy's nodes: a single node is a node set of one.

kwok fakes one node or thousands with the same controllers; vkpy does too. Every way
to run, one node, a node set (`--nodes`, `--node-set`), a set shared by replicas, a
node with standbys, is this host with another membership (vkpy.fleet.membership,
vkpy.fleet.sharded), which says which nodes are served here and when. The host
builds every node the same way (its NodeController, Lease, PodController and
backend, each with its own settings) and runs them behind what they share: one API
client (one connection pool), one pod watch, one kubelet API listener that finds
the pod's node and backend from the path (or the port a request came in on), and
one Event recorder.

One node keeps what it always had: its backend's state in --state-dir itself (an
earlier run's pods are adopted from there), a pod watch of its own, field-selected
on spec.nodeName (the shared watch lists every bound pod of the cluster: it saves
watches for many nodes, for one it only reads more), its Lease renewed at the
period's start, and the serving certificate naming its IP and host name. Many
nodes: each keeps its backend's state in --state-dir/nodes/<node>, and their
registration, status and Leases go through an API connection pool of their own
(the kubelet's heartbeat client), so pod work filling the main pool cannot starve
them. Registration goes a few nodes at a time, and only once the listener the
nodes' status points at listens; the Lease and status loops start at random points
of their periods, so 1000 nodes cost the API server what 1000 kubelets' defaults
would (a Lease renewal per node every 10 s, a status write on change and every 5
minutes), spread evenly rather than in bursts.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Protocol

from vkpy.api import ApiDependencies, KubeletServer, ListenError
from vkpy.api.certs.csr import CertificateRotator
from vkpy.core.clock import SYSTEM_CLOCK, Clock
from vkpy.core.objects import KubeObject, node_name_of
from vkpy.core.shared_timer import SharedTimer
from vkpy.fleet.leader import LeaderElector
from vkpy.fleet.node_set import SET_LABEL, Member
from vkpy.fleet.settings import Settings
from vkpy.kube.client import KubeClient
from vkpy.kube.events import EventRecorder
from vkpy.node.background import TaskSupervisor
from vkpy.node.heartbeat.lease import LeaseKeeper
from vkpy.node.heartbeat.node_controller import NodeController
from vkpy.node.heartbeat.node_watch import NodeWatch
from vkpy.node.pods.backend_events import forward_backend_events
from vkpy.node.pods.pod_controller import PodController
from vkpy.node.pods.shared_pod_watch import SharedPodWatch
from vkpy.node.podspec.pod_config import ApiObjectSource
from vkpy.providers import registry
from vkpy.providers.base import Provider

log = logging.getLogger(__name__)

AT_ONCE = 32
"""Nodes registering (create, first status, first Lease) at the same time, and a
shared set's Leases taken or released at the same time."""


def heartbeat_connections(nodes: int) -> int:
    """The heartbeat pool's size: 1000 nodes renew 100 Leases a second, so with answers
    taking a second 100 connections are busy (HTTP/1.1: one request per connection);
    one node's Lease and status take turns on one."""
    if nodes == 1:
        return 1
    return max(4, min(128, nodes // 8))


def hosted_members(settings: Settings) -> tuple[Member, ...]:
    """The nodes of the set: the node set's, or the one node of --node-name."""
    return settings.node_set or (Member(settings.node, settings.pods, settings.provider_config),)


class Membership(Protocol):
    """Which nodes of the host's set are served here, and when (see the module
    docstring): static, shared by Leases per node, or elected."""

    sharing: bool
    """Nodes come and go here (a shared set): serving none is a healthy state."""

    @property
    def elector(self) -> LeaderElector | None:
        """The leader Lease the host's work waits for (None: it runs at once)."""

    def fence(self, client: KubeClient) -> KubeClient:
        """The client the host's work writes through."""

    def attach(self, host: NodeHost) -> Provider:
        """Build what serving needs before the API server is reached (a bad backend
        setting raises registry.ProviderConfigError here); the backend of the
        listener's requests that name no node's pod."""

    async def lead(self, work: Callable[[], Awaitable[None]]) -> None:
        """Run `work` (the host's) when and while this process may."""

    async def serve(self) -> None:
        """Serve this process's nodes (with `host.serve`) until cancelled."""

    async def stop(self) -> None:
        """After the work: let go of what is held (Leases), so others take over at once."""


@dataclass
class HostedNode:
    """One node of the host: its controllers and its backend."""

    member: Member
    provider: Provider
    node: NodeController
    pods: PodController
    tasks: TaskSupervisor
    lease: LeaseKeeper | None
    """None where the membership renews the node's Lease itself (a shared set: the
    Lease a replica holds the node by is the node's heartbeat)."""


class NodeHost:
    """The nodes of a set behind shared parts: `run` until cancelled, then `stop`."""

    def __init__(
        self,
        settings: Settings,
        client: KubeClient,
        membership: Membership,
        clock: Clock = SYSTEM_CLOCK,
    ) -> None:
        """Raises registry.ProviderConfigError for bad backend settings."""
        self.settings = settings
        self.members = hosted_members(settings)
        self.membership = membership
        self.clock = clock
        self.client = membership.fence(client)
        first = self.members[0].node
        self.events = EventRecorder(self.client, host=first.name, clock=clock.time)
        self.objects = ApiObjectSource(self.client, clock)
        self.watch: SharedPodWatch | None = None
        """One watch for many nodes (a shared set keeps every node's pods, for a node
        taken later); None: one node watches only its own pods (field-selected)."""
        if len(self.members) > 1 or membership.sharing:
            kept = [m.node.name for m in self.members] if membership.sharing else []
            self.watch = SharedPodWatch(self.client, clock, keep=kept)
        pool = client.separate_pool(heartbeat_connections(len(self.members)))
        self._pool: KubeClient | None = None if pool is client else pool
        """The heartbeat pool, when it is not the client itself (a credential plugin's)."""
        self.heartbeats = membership.fence(pool)
        """What the nodes' registration, status and Leases go through: a pool of their
        own (the kubelet's heartbeat client), so a burst of pod work filling the main
        pool cannot make a Lease late, for one node as for many."""
        self.beat_clock = SharedTimer(clock)
        """The clock of the nodes' status and Lease loops: their sleeps share one timer."""
        self.served: dict[str, HostedNode] = {}
        """The nodes served here now, by name."""
        self._gate = asyncio.Semaphore(AT_ONCE)
        self._registered = 0
        self.api = KubeletServer(settings.api, self._listener(membership.attach(self)), clock=clock)

    # --- building a node --------------------------------------------------------------

    def backend(self, member: Member) -> Provider:
        """A node's backend (not started). Raises registry.ProviderConfigError."""
        name = member.node.name
        state = Path(self.settings.state_dir)
        return registry.create(
            self.settings.provider,
            member.provider_config,
            registry.ProviderContext(
                node_name=name,
                state_dir=str(state if not self.settings.node_set else state / "nodes" / name),
                internal_ip=member.node.internal_ip,
                operating_system=member.node.operating_system,
            ),
        )

    def build(
        self, member: Member, client: KubeClient | None = None, keep_lease: bool = True
    ) -> HostedNode:
        """One node with a new backend (neither started), attached to the pod watch.
        `client`: what the node writes through (default: the host's client for its pods,
        the heartbeat pool for its registration, status and Lease); `keep_lease`: it
        renews its Lease itself. Raises registry.ProviderConfigError."""
        provider = self.backend(member)
        events = self.events.for_host(member.node.name)
        tasks = TaskSupervisor(clock=self.clock)
        beat = client or self.heartbeats
        node = NodeController(
            beat, provider, events, member.node, self.beat_clock, task_problem=tasks.problem
        )
        lease = None
        if keep_lease:
            lease = LeaseKeeper(
                beat,
                member.node.name,
                lambda: node.uid,
                duration=member.node.lease_duration,
                renew_interval=member.node.lease_renew_interval,
                spread=member.node.spread,
                clock=self.beat_clock,
                may_exist=lambda: node.adopted,
            )
        pods = PodController(
            client or self.client,
            provider,
            events,
            self.objects,
            member.pods,
            self.clock,
            shared_watch=self.watch,
        )
        forward_backend_events(provider, events, pods.find)
        return HostedNode(member, provider, node, pods, tasks, lease)

    # --- running ------------------------------------------------------------------------

    async def run(self) -> None:
        """Serve until cancelled (the membership says when: an elected host only while
        it leads); raises when a part fails."""
        await self.membership.lead(self._run)

    async def _run(self) -> None:
        try:
            async with asyncio.TaskGroup() as group:

                def start(name: str, work: Awaitable[None]) -> None:
                    group.create_task(run_logged(name, work), name=name)

                self.objects.start()
                start("events", self.events.run())
                start("kubelet-api", self.api.run())
                if self.watch is not None:
                    start("pod-watch", self.watch.run())
                start("node-watch", self._node_watch().run())
                # A Node's status names this listener's address and port (a replica
                # taking a node over moves it here): register only once it listens.
                await self.api.listening.wait()
                await self.membership.serve()
        finally:
            await self.objects.close()
            await self.events.flush(2.0)

    def _node_watch(self) -> NodeWatch:
        """One watch of the served Nodes (their changes by others: vkpy.node.heartbeat.
        node_watch), through the main pool (it is a stream; the heartbeat pool sends
        requests only)."""

        def served(name: str) -> NodeController | None:
            node = self.served.get(name)
            return None if node is None else node.node

        first = self.members[0].node
        in_set = SET_LABEL in first.labels  # a set: every node carries the set's name
        return NodeWatch(
            self.client,
            served,
            self.controllers,
            name="" if in_set else first.name,
            label_selector=f"{SET_LABEL}={first.labels[SET_LABEL]}" if in_set else "",
            clock=self.clock,
        )

    async def serve(self, node: HostedNode) -> None:
        """Run one node until cancelled: its backend, its registration (a few nodes at a
        time), then its loops; its backend is closed when it ends."""
        name = node.member.node.name
        self.served[name] = node
        try:
            await node.provider.start()
            node.tasks.add_from(node.provider)
            async with self._gate:
                await node.node.register()
            self._registered += 1
            if len(self.members) > 1 and self._registered == len(self.members):
                log.info("all nodes registered", extra={"nodes": self._registered})
            async with asyncio.TaskGroup() as group:
                group.create_task(node.node.keep(), name="node")
                if node.lease is not None:
                    group.create_task(node.lease.run(), name="lease")
                group.create_task(node.pods.run(), name="pods")
                if not node.tasks.empty:  # the backend's own tasks, if it has any
                    group.create_task(node.tasks.run(), name="backend-tasks")
        finally:
            if self.served.get(name) is node:
                del self.served[name]
            if self.watch is not None:
                self.watch.detach(name)
            await node.provider.close()

    async def stop(self) -> None:
        """After `run` (or instead of it): the membership lets go of what it holds, and
        the heartbeat pool is closed."""
        try:
            await self.membership.stop()
        finally:
            if self._pool is not None:
                await self._pool.close()

    # --- what the health probes read --------------------------------------------------

    def controllers(self) -> list[NodeController]:
        """The node controllers of the nodes served here now."""
        return [n.node for n in self.served.values()]

    def certificate(self) -> CertificateRotator | None:
        """The serving certificate asked for by CSR (--rotate-server-certificates) when
        it is the one node's own (static or elected); a set's one certificate names its
        first node only (which, in a shared set, another replica may hold), so it does
        not hold a set's readiness back."""
        if len(self.members) > 1 or self.sharing:
            return None
        return self.api.rotator

    @property
    def sharing(self) -> bool:
        return self.membership.sharing

    @property
    def elector(self) -> LeaderElector | None:
        return self.membership.elector

    # --- what the one listener reads --------------------------------------------------

    def _listener(self, default: Provider) -> ApiDependencies:
        """The listener's view of the nodes served here. It answers on the first node's
        name, with the addresses true of every node (one node: its IP and host name;
        many: their IP); in a set, each node's port names that node."""
        first = self.members[0].node
        if len(self.members) == 1:
            named = [first.internal_ip, first.hostname or first.name]
            addresses = tuple(dict.fromkeys(a for a in named if a))
            ports: dict[int, str] = {}
        else:
            addresses = tuple(a for a in (first.internal_ip,) if a) or (first.name,)
            ports = {m.node.port: m.node.name for m in self.members if m.node.port}
        # The API server's kubelet client certificate is signed by the cluster CA in
        # kubeadm-style clusters: trust what the client trusts.
        trusted = None if self.settings.api.client_ca_file else self.client.cluster_ca()
        return ApiDependencies(
            node_name=first.name,
            addresses=addresses,
            pods=self.all_pods,
            pod_documents=self.all_pod_documents,
            find_pod=self.find,
            running_pods=self.running_pods,
            provider=default,
            provider_for=self.provider_for,
            node_ports=ports,
            for_node=self.node_api,
            client=self.client,
            events=self.events,
            default_client_ca=trusted,
        )

    def all_pods(self) -> list[KubeObject]:
        return [pod for n in self.served.values() for pod in n.pods.pods()]

    def all_pod_documents(self) -> list[bytes]:
        return [doc for n in self.served.values() for doc in n.pods.pod_documents()]

    def find(self, namespace: str, name: str, uid: str | None = None) -> KubeObject | None:
        for node in self.served.values():
            found = node.pods.find(namespace, name, uid)
            if found is not None:
                return found
        return None

    async def running_pods(self) -> list[KubeObject]:
        """What the backends of the nodes served here run, for /runningpods/."""
        return [pod for n in list(self.served.values()) for pod in await n.pods.running_pods()]

    def node_api(self, name: str) -> ApiDependencies | None:
        """What the listener uses for a request on node `name`'s port (None: that node
        is not served here now)."""
        node = self.served.get(name)
        if node is None:
            return None
        return replace(
            self.api.deps,
            node_name=name,
            pods=node.pods.pods,
            pod_documents=node.pods.pod_documents,
            find_pod=node.pods.find,
            running_pods=node.pods.running_pods,
            provider=node.provider,
            provider_for=None,
            node_ports={},
            for_node=None,
        )

    def provider_for(self, pod: KubeObject) -> Provider:
        node = self.served.get(node_name_of(pod))
        if node is None:  # find() only returns pods of the nodes served here
            raise LookupError(f"no node served here runs {node_name_of(pod) or 'the pod'}")
        return node.provider


async def run_logged(name: str, work: Awaitable[None]) -> None:
    """Run a root task, which should run until cancelled: its end or failure is logged
    (a listener that cannot listen in one line: which address, which flag) and raised."""
    try:
        await work
        log.error("task ended unexpectedly", extra={"task": name})
        raise RuntimeError(f"task {name} ended")
    except asyncio.CancelledError:
        log.debug("task stopped", extra={"task": name})
        raise
    except ListenError as error:
        log.error(str(error))
        raise
    except Exception:
        log.exception("task failed", extra={"task": name})
        raise
