"""Wiring: build every part from `Settings` and run them in one asyncio TaskGroup.

This is the only place long-lived tasks are started: the root tasks here and, below
them, tasks in their own TaskGroups (the pod watch and workers, the kubelet API's
certificate rotation), which fail with their root; what else starts a task owns it
for one pod or one stream only. Each root task is named, and when one ends the
runner logs which and why; a crashed task stops the node (and the process exits
non-zero) rather than leaving a half-working kubelet. A backend's own long-lived
tasks (`RunsTasks`) run here too, under the TaskSupervisor, which restarts them with
back-off and turns the node NotReady while they keep failing.
SIGTERM and SIGINT stop everything gracefully: tasks are cancelled, queued Events
flushed, the backend and the API client closed. Pods keep running in the backend,
to be adopted next time. With `--leader-elect` the node's work runs only while this
replica holds the leader Lease (vkpy.fleet.leader), through an API client whose writes
are fenced by it; losing the Lease ends the process (status 1) so that it starts
again as a standby, and stopping releases the Lease so a standby takes over at once.
"""

from __future__ import annotations

import asyncio
import logging
import signal
import time
from collections.abc import Coroutine
from dataclasses import replace

from vkpy.api import ApiDependencies, KubeletServer, ListenError
from vkpy.api.health import HealthServer
from vkpy.app import gc_pauses, loop_lag
from vkpy.fleet.host import Fleet
from vkpy.fleet.leader import LeaderElector, LeadershipLost
from vkpy.fleet.settings import Settings
from vkpy.fleet.sharded import ShardedFleet
from vkpy.kube.client import ApiError, KubeClient
from vkpy.kube.events import EventRecorder
from vkpy.kube.node_address import node_address_towards
from vkpy.node.background import TaskSupervisor
from vkpy.node.heartbeat.lease import LeaseKeeper
from vkpy.node.heartbeat.node_controller import NodeController
from vkpy.node.pods.backend_events import forward_backend_events
from vkpy.node.pods.pod_controller import PodController
from vkpy.node.podspec.pod_config import ApiObjectSource
from vkpy.providers import registry
from vkpy.providers.base import Provider

log = logging.getLogger(__name__)


async def wait_for_api(client: KubeClient, timeout: float) -> str:
    """The server's version, retrying until `timeout` s have passed."""
    deadline = time.monotonic() + timeout
    delay = 0.5
    while True:
        try:
            version = await client.get("/version")
            return str(version.get("gitVersion", "unknown"))
        except ApiError as error:
            if error.status in (401, 403) or time.monotonic() + delay > deadline:
                raise
            log.warning("API server not reachable yet", extra={"error": str(error)})
            await asyncio.sleep(delay)
            delay = min(delay * 2, 5)


async def _watched(name: str, coro: Coroutine[object, object, None]) -> None:
    """Run a root task, logging why it ended."""
    try:
        await coro
        log.error("task ended unexpectedly", extra={"task": name})
        raise RuntimeError(f"task {name} ended")
    except asyncio.CancelledError:
        log.debug("task stopped", extra={"task": name})
        raise
    except ListenError as error:
        log.error(str(error))  # one line: which address, which flag
        raise
    except Exception:
        log.exception("task failed", extra={"task": name})
        raise


def _addresses(settings: Settings) -> tuple[str, ...]:
    """The node's addresses, as in its status: the serving certificate's names."""
    out = [settings.node.internal_ip, settings.node.hostname or settings.node.name]
    return tuple(dict.fromkeys(a for a in out if a))


class Node:
    """All the parts of one virtual node, ready to `run`."""

    def __init__(self, settings: Settings, client: KubeClient, provider: Provider) -> None:
        self.settings = settings
        self.client = client
        self.provider = provider
        self.events = EventRecorder(client, host=settings.node.name)
        self.tasks = TaskSupervisor()
        self.node = NodeController(
            client, provider, self.events, settings.node, task_problem=self.tasks.problem
        )
        self.lease = LeaseKeeper(
            client,
            settings.node.name,
            lambda: self.node.uid,
            duration=settings.node.lease_duration,
            renew_interval=settings.node.lease_renew_interval,
            may_exist=lambda: self.node.adopted,
        )
        self.pods = PodController(
            client, provider, self.events, ApiObjectSource(client), settings.pods
        )
        forward_backend_events(provider, self.events, self.pods.find)
        self.api = KubeletServer(
            settings.api,
            ApiDependencies(
                node_name=settings.node.name,
                addresses=_addresses(settings),
                pods=self.pods.pods,
                find_pod=self.pods.find,
                running_pods=self.pods.running_pods,
                provider=provider,
                client=client,
                events=self.events,
                # The API server's kubelet client certificate is signed by the
                # cluster CA in kubeadm-style clusters: trust what the client trusts.
                default_client_ca=None if settings.api.client_ca_file else client.cluster_ca(),
            ),
        )

    async def run(self) -> None:
        async with asyncio.TaskGroup() as group:

            def start(name: str, coro: Coroutine[object, object, None]) -> None:
                group.create_task(_watched(name, coro), name=name)

            start("events", self.events.run())
            start("kubelet-api", self.api.run())
            # The Node's status names this process's address and port: write it only
            # once something listens there (a replica taking over moves the node here).
            await self.api.listening.wait()
            start("node", self.node.run())
            await self.node.registered.wait()
            start("lease", self.lease.run())
            start("pods", self.pods.run())
            start("backend-tasks", self.tasks.run())


def with_node_address(settings: Settings, server: str) -> Settings:
    """`settings` with the node's address, when --node-ip left it open, set to this
    host's address towards `server` (the API server the client loaded)."""
    if settings.node.internal_ip:
        return settings
    address = node_address_towards(server)
    return replace(
        settings,
        node=replace(settings.node, internal_ip=address),
        pods=replace(settings.pods, host_ip=address),
        node_set=tuple(
            replace(
                m,
                node=replace(m.node, internal_ip=m.node.internal_ip or address),
                pods=replace(m.pods, host_ip=m.pods.host_ip or address),
            )
            for m in settings.node_set
        ),
    )


async def run(settings: Settings) -> int:
    """Run the node until a signal; the process exit status."""
    try:
        client = await KubeClient.connect(settings.kube)
    except Exception as error:  # the config loaders raise many types
        log.error("cannot load the Kubernetes client configuration", extra={"error": str(error)})
        return 2
    gc_pauses.count_pauses()
    freezer = asyncio.create_task(gc_pauses.ScheduledCollections().run(), name="gc-schedule")
    lag = asyncio.create_task(loop_lag.LoopLag().run(), name="loop-lag")
    try:
        settings = with_node_address(settings, client.host)
        if settings.node_set:
            return await _serve_set(settings, client)
        try:
            provider = registry.create(
                settings.provider,
                settings.provider_config,
                registry.ProviderContext(
                    node_name=settings.node.name,
                    state_dir=settings.state_dir,
                    internal_ip=settings.node.internal_ip,
                    operating_system=settings.node.operating_system,
                ),
            )
        except registry.ProviderConfigError as error:
            log.error("invalid provider configuration", extra={"error": str(error)})
            return 2
        if not await _connected(client, settings, node=settings.node.name):
            return 1
        return await _serve(settings, client, provider)
    finally:
        freezer.cancel()
        lag.cancel()
        await client.close()


class Probes:
    """The checks behind --health-port (vkpy.api.health): what this replica is doing now."""

    def __init__(self, settings: Settings, elector: LeaderElector | None) -> None:
        self._settings = settings
        self._elector = elector
        self.controllers: list[NodeController] = []
        """The node controllers this process runs: set once it leads (at once without
        leader election; every node of a node set; a shared set's nodes served here,
        a list the set keeps up to date)."""
        self.sharing = False
        """A shared node set: serving no node (yet, or for now) is a healthy state."""
        self._started = time.monotonic()

    def loops(self) -> str | None:
        """Liveness: the loops in charge (node status, or the Lease tries) keep turning."""
        now = time.monotonic()
        if self.controllers:
            limit = max(60.0, 6 * self._settings.node.check_interval)
            for controller in self.controllers:
                last = controller.last_loop_at
                if last is not None and now - last > limit:
                    return f"a node status loop has not turned for {now - last:.0f} s"
            return None
        if self._elector is not None:
            last = self._elector.last_try_at
            election = self._settings.election
            limit = max(60.0, 10 * (election.retry_period if election else 2.0))
            if now - (last if last is not None else self._started) > limit:
                return "the leader election loop has not turned"
        return None

    def api(self) -> str | None:
        """Readiness: the API server answers, and the nodes run here are registered."""
        if self.controllers:
            waiting = sum(not c.registered.is_set() for c in self.controllers)
            if waiting:
                return f"{waiting} of {len(self.controllers)} nodes not registered yet"
            return next((c.api_error for c in self.controllers if c.api_error), None)
        if self.sharing:
            return None
        if self._elector is not None:
            return self._elector.last_error
        return "starting"


async def _start_health(settings: Settings, probes: Probes) -> HealthServer | None:
    """The --health-port site, if asked for; OSError when the port is taken."""
    if not settings.health_port:
        return None
    health = HealthServer(
        settings.health_bind_address,
        settings.health_port,
        live={"loops": probes.loops},
        ready={"api": probes.api},
    )
    await health.start()
    return health


async def _lead(settings: Settings, client: KubeClient, provider: Provider, probes: Probes) -> None:
    """Run the node: start the backend, then every controller, until cancelled."""
    node = Node(settings, client, provider)
    probes.controllers = [node.node]
    try:
        await provider.start()
        node.tasks.add_from(provider)
        await node.run()
    finally:
        await node.events.flush(2.0)
        await provider.close()


async def _connected(client: KubeClient, settings: Settings, **about: object) -> bool:
    """Wait for the API server and log "connected" (with `about`), or log why not."""
    try:
        version = await wait_for_api(client, settings.startup_timeout)
    except ApiError as error:
        log.error("cannot reach the API server", extra={"error": str(error)})
        return False
    log.info("connected", extra={"server": client.host, "version": version, **about})
    return True


async def _serve_set(settings: Settings, client: KubeClient) -> int:
    """Serve a node set (vkpy.fleet.host; with --leader-elect, this replica's share of it,
    vkpy.fleet.sharded) until a signal; the process exit status."""
    try:
        fleet: Fleet | ShardedFleet = (
            Fleet(settings, client) if settings.election is None else ShardedFleet(settings, client)
        )
    except registry.ProviderConfigError as error:
        log.error("invalid provider configuration", extra={"error": str(error)})
        return 2
    if not await _connected(client, settings, nodes=len(settings.node_set)):
        return 1
    probes = Probes(settings, None)
    probes.controllers, probes.sharing = fleet.controllers, fleet.sharing
    try:
        health = await _start_health(settings, probes)
    except OSError as error:
        log.error("cannot listen on --health-port", extra={"error": str(error)})
        return 1
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    await fleet.start()
    task = asyncio.create_task(fleet.run(), name="fleet")
    stopper = asyncio.create_task(stop.wait(), name="signals")
    try:
        await asyncio.wait({task, stopper}, return_when=asyncio.FIRST_COMPLETED)
        if stop.is_set():
            log.info("stopping", extra={"nodes": len(settings.node_set)})
            task.cancel()
        try:
            await task
        except asyncio.CancelledError:
            return 0
        except BaseExceptionGroup:
            return 1
        return 1
    finally:
        stopper.cancel()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.remove_signal_handler(sig)
        await fleet.stop()
        if health is not None:
            await health.close()
        log.info("stopped", extra={"nodes": len(settings.node_set)})


async def _serve(settings: Settings, client: KubeClient, provider: Provider) -> int:
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    elector = None if settings.election is None else LeaderElector(client, settings.election)
    probes = Probes(settings, elector)
    try:
        health = await _start_health(settings, probes)
    except OSError as error:
        log.error("cannot listen on --health-port", extra={"error": str(error)})
        return 1
    if elector is None or settings.election is None:
        work = _lead(settings, client, provider, probes)
    else:
        fenced = client.fenced(elector.write_budget)
        log.info(
            "waiting to lead",
            extra={"node": settings.node.name, "identity": settings.election.identity},
        )
        work = elector.run(lambda: _lead(settings, fenced, provider, probes))
    task = asyncio.create_task(work, name="node")
    stopper = asyncio.create_task(stop.wait(), name="signals")
    try:
        await asyncio.wait({task, stopper}, return_when=asyncio.FIRST_COMPLETED)
        if stop.is_set():
            log.info("stopping", extra={"node": settings.node.name})
            task.cancel()
        try:
            await task
        except asyncio.CancelledError:
            return 0
        except LeadershipLost as error:
            log.error(
                "leadership lost: exiting so that this replica starts again as a standby",
                extra={"error": str(error)},
            )
            return 1
        except BaseExceptionGroup:
            return 1
        return 1
    finally:
        stopper.cancel()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.remove_signal_handler(sig)
        if elector is not None:
            await elector.release()
        if health is not None:
            await health.close()
        log.info("stopped", extra={"node": settings.node.name})
