"""Wiring for a node set: many virtual nodes in one process sharing what can be shared.

kwok shows one process can fake thousands of nodes; doing it with one vkpy per node
would cost a Python interpreter, an API connection pool, a pod watch and a listener
each. Here every node keeps its own controller, Lease, pod controller and backend
(so each can have its own settings), and the nodes share one API client (one
connection pool), ONE pod watch routed by spec.nodeName (vkpy.node.pods.shared_pod_watch),
one kubelet API listener that finds the pod's node and backend from the path, and
one Event recorder. The nodes' registration, status and Leases go through an API connection pool of
their own (the kubelet's heartbeat client), so pod work filling the main pool cannot
starve them. Registration goes a few nodes at a time, and the Lease and status
loops start at random points of their periods, so 1000 nodes cost the API server
what 1000 kubelets' defaults would (a Lease renewal per node every 10 s, a status
write on change and every 5 minutes), spread evenly rather than in bursts.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Coroutine
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Protocol

from vkpy.api import ApiDependencies, KubeletServer
from vkpy.core.objects import KubeObject, spec
from vkpy.fleet.node_set import Member
from vkpy.fleet.settings import Settings
from vkpy.kube.client import KubeClient
from vkpy.kube.events import EventRecorder
from vkpy.node.background import TaskSupervisor
from vkpy.node.heartbeat.lease import LeaseKeeper
from vkpy.node.heartbeat.node_controller import NodeController
from vkpy.node.pods.backend_events import forward_backend_events
from vkpy.node.pods.pod_controller import PodController
from vkpy.node.pods.shared_pod_watch import SharedPodWatch
from vkpy.node.podspec.pod_config import ApiObjectSource
from vkpy.providers import registry
from vkpy.providers.base import Provider

log = logging.getLogger(__name__)

REGISTERING_AT_ONCE = 32
"""Nodes registering (create, first status, first Lease) at the same time."""


def heartbeat_connections(nodes: int) -> int:
    """The heartbeat pool's size: 1000 nodes renew 100 Leases a second, so with answers
    taking a second 100 connections are busy (HTTP/1.1: one request per connection)."""
    return max(4, min(128, nodes // 8))


@dataclass
class FleetNode:
    """One node of the set: its controllers and its backend."""

    member: Member
    provider: Provider
    node: NodeController
    lease: LeaseKeeper
    pods: PodController
    tasks: TaskSupervisor


def build_node(
    settings: Settings,
    member: Member,
    client: KubeClient,
    events: EventRecorder,
    objects: ApiObjectSource,
    watch: SharedPodWatch,
    heartbeats: KubeClient | None = None,
) -> FleetNode:
    """One node of the set with its backend (not started), attached to `watch`.
    `heartbeats`: the client (a pool of its own) for the node's registration, status
    and Lease (default: `client`). Raises registry.ProviderConfigError for bad backend
    settings."""
    name = member.node.name
    provider = create_backend(settings, member)
    recorder = events.for_host(name)
    tasks = TaskSupervisor()
    beat = heartbeats or client
    node = NodeController(beat, provider, recorder, member.node, task_problem=tasks.problem)
    lease = LeaseKeeper(
        beat,
        name,
        lambda: node.uid,
        duration=member.node.lease_duration,
        renew_interval=member.node.lease_renew_interval,
        spread=True,
        may_exist=lambda: node.adopted,
    )
    pods = PodController(client, provider, recorder, objects, member.pods, shared_watch=watch)
    forward_backend_events(provider, recorder, pods.find)
    return FleetNode(member, provider, node, lease, pods, tasks)


def create_backend(settings: Settings, member: Member) -> Provider:
    """The backend of one node of the set (not started), with a state folder of its
    own. Raises registry.ProviderConfigError for bad backend settings."""
    name = member.node.name
    return registry.create(
        settings.provider,
        member.provider_config,
        registry.ProviderContext(
            node_name=name,
            state_dir=str(Path(settings.state_dir) / "nodes" / name),
            internal_ip=member.node.internal_ip,
        ),
    )


def node_dependencies(shared: ApiDependencies, node: FleetNode) -> ApiDependencies:
    """The listener's dependencies narrowed to one node: its name (authorization),
    its pods and its backend (/pods, /stats/summary, logs and exec of its pods)."""
    return replace(
        shared,
        node_name=node.member.node.name,
        pods=node.pods.pods,
        find_pod=node.pods.find,
        running_pods=node.pods.running_pods,
        provider=node.provider,
        provider_for=None,
        node_ports={},
        for_node=None,
    )


class SetView(Protocol):
    """What the one listener of a node set reads from the nodes served here."""

    def all_pods(self) -> list[KubeObject]: ...

    def find(self, namespace: str, name: str, uid: str | None = None) -> KubeObject | None: ...

    def node_api(self, name: str) -> ApiDependencies | None: ...

    def provider_for(self, pod: KubeObject) -> Provider: ...


def set_listener(
    settings: Settings,
    client: KubeClient,
    events: EventRecorder,
    default: Provider,
    view: SetView,
) -> KubeletServer:
    """The one kubelet API listener of a node set (vkpy.fleet.host, vkpy.fleet.sharded): it answers
    on the first node's name, routes each pod to its node's backend and each node port
    to that node (`default` is the backend of requests naming no node's pod)."""
    first = settings.node_set[0].node
    addresses = tuple(a for a in (first.internal_ip,) if a) or (first.name,)
    return KubeletServer(
        settings.api,
        ApiDependencies(
            node_name=first.name,
            addresses=addresses,
            pods=view.all_pods,
            find_pod=view.find,
            provider=default,
            provider_for=view.provider_for,
            node_ports={m.node.port: m.node.name for m in settings.node_set if m.node.port},
            for_node=view.node_api,
            client=client,
            events=events,
            default_client_ca=None if settings.api.client_ca_file else client.cluster_ca(),
        ),
    )


class Fleet:
    """The nodes of a set: `start`, `run` until cancelled, then `stop`."""

    def __init__(self, settings: Settings, client: KubeClient) -> None:
        members = settings.node_set
        first = members[0].node
        self.events = EventRecorder(client, host=first.name)
        self.watch = SharedPodWatch(client)
        self.nodes: dict[str, FleetNode] = {}
        objects = ApiObjectSource(client)
        self._client = client
        self.heartbeats = client.separate_pool(heartbeat_connections(len(members)))
        for member in members:
            self.nodes[member.node.name] = build_node(
                settings, member, client, self.events, objects, self.watch, self.heartbeats
            )
        self.api = set_listener(
            settings, client, self.events, self.nodes[first.name].provider, self
        )
        self.registered = 0

    # --- what the one listener reads ------------------------------------------------

    def all_pods(self) -> list[KubeObject]:
        return [pod for n in self.nodes.values() for pod in n.pods.pods()]

    def find(self, namespace: str, name: str, uid: str | None = None) -> KubeObject | None:
        for node in self.nodes.values():
            found = node.pods.find(namespace, name, uid)
            if found is not None:
                return found
        return None

    def node_api(self, name: str) -> ApiDependencies | None:
        """What the listener uses for a request that came in on node `name`'s port."""
        node = self.nodes.get(name)
        return None if node is None else node_dependencies(self.api.deps, node)

    def provider_for(self, pod: KubeObject) -> Provider:
        node = self.nodes.get(str(spec(pod).get("nodeName") or ""))
        if node is None:  # find() only returns pods of our nodes
            raise LookupError(f"no node of this process runs {spec(pod).get('nodeName')}")
        return node.provider

    # --- running --------------------------------------------------------------------

    sharing = False
    """Every node of the set is served here (vkpy.fleet.sharded's sets are shared)."""

    @property
    def controllers(self) -> list[NodeController]:
        """The node controllers (for the health probes)."""
        return [n.node for n in self.nodes.values()]

    async def start(self) -> None:
        """Before `run`: start every node's backend."""
        for node in self.nodes.values():
            await node.provider.start()
            node.tasks.add_from(node.provider)

    async def stop(self) -> None:
        """After `run`: send the last Events, close the backends."""
        await self.events.flush(2.0)
        for node in self.nodes.values():
            await node.provider.close()
        if self.heartbeats is not self._client:
            await self.heartbeats.close()

    async def run(self) -> None:
        gate = asyncio.Semaphore(REGISTERING_AT_ONCE)
        async with asyncio.TaskGroup() as group:

            def start(name: str, coro: Coroutine[object, object, None]) -> None:
                group.create_task(run_logged(name, coro), name=name)

            start("events", self.events.run())
            start("kubelet-api", self.api.run())
            start("pod-watch", self.watch.run())
            for name, node in self.nodes.items():
                start(f"node/{name}", self._run_node(node, gate))

    async def _run_node(self, n: FleetNode, gate: asyncio.Semaphore) -> None:
        async with gate:
            await n.node.register()
        self.registered += 1
        if self.registered == len(self.nodes):
            log.info("all nodes registered", extra={"nodes": self.registered})
        async with asyncio.TaskGroup() as group:
            group.create_task(n.node.keep(), name="node")
            group.create_task(n.lease.run(), name="lease")
            group.create_task(n.pods.run(), name="pods")
            group.create_task(n.tasks.run(), name="backend-tasks")


async def run_logged(name: str, coro: Awaitable[None]) -> None:
    """Run a task that should run forever; its end or failure is logged and raised."""
    try:
        await coro
        raise RuntimeError(f"task {name} ended")
    except asyncio.CancelledError:
        raise
    except Exception:
        log.exception("task failed", extra={"task": name})
        raise
