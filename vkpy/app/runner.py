"""Wiring: settings to a node host (vkpy.fleet.host) and its membership; signals,
health probes and the exit status.

Whatever runs, one node, a node set, a set shared by replicas or a node with
standbys, is a host of nodes; the settings choose its membership: static (every
node, each with its Lease), sharded (--leader-elect with a node set: a Lease per
node, vkpy.fleet.sharded) or elected (--leader-elect for one node: its work runs
only while this replica holds the leader Lease, through an API client whose writes
are fenced by it; losing the Lease ends the process, status 1, so that it starts
again as a standby, and stopping releases it so a standby takes over at once).
The host starts every long-lived task and logs which one ended and why; a crashed
task stops the host and the process exits non-zero rather than leaving a
half-working kubelet. SIGTERM and SIGINT stop everything gracefully: tasks are
cancelled, queued Events flushed, the backends and the API client closed. Pods keep
running in the backends, to be adopted next time.
"""

from __future__ import annotations

import asyncio
import logging
import signal
import time
from dataclasses import replace
from typing import Protocol

from vkpy.api.certs.csr import CertificateRotator
from vkpy.api.health import HealthServer
from vkpy.app import gc_pauses, loop_lag
from vkpy.fleet.host import Membership, NodeHost
from vkpy.fleet.leader import LeaderElector, LeadershipLost
from vkpy.fleet.membership import Elected, Static
from vkpy.fleet.settings import Settings
from vkpy.fleet.sharded import Sharded
from vkpy.kube.client import ApiError, KubeClient
from vkpy.kube.node_address import node_address_towards
from vkpy.node.heartbeat.node_controller import NodeController
from vkpy.providers import registry

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


def membership(settings: Settings, client: KubeClient) -> Membership:
    """Who serves the nodes of `settings` and when."""
    if settings.election is None:
        return Static()
    if settings.node_set:
        return Sharded()
    return Elected(LeaderElector(client, settings.election))


async def run(settings: Settings) -> int:
    """Run the node (or set) until a signal; the process exit status."""
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
        try:
            host = NodeHost(settings, client, membership(settings, client))
        except registry.ProviderConfigError as error:
            log.error("invalid provider configuration", extra={"error": str(error)})
            return 2
        try:
            return await _serve(settings, client, host)
        finally:
            await host.stop()  # what it holds released: a standby takes over at once
            log.info("stopped", extra=_about(settings))
    finally:
        freezer.cancel()
        lag.cancel()
        await client.close()


def _about(settings: Settings) -> dict[str, object]:
    """What the start and stop log lines say the process serves."""
    if settings.node_set:
        return {"nodes": len(settings.node_set)}
    return {"node": settings.node.name}


class Probed(Protocol):
    """What the probes read of the host (vkpy.fleet.host.NodeHost): what it serves now."""

    @property
    def sharing(self) -> bool: ...

    @property
    def elector(self) -> LeaderElector | None: ...

    def controllers(self) -> list[NodeController]: ...

    def certificate(self) -> CertificateRotator | None: ...


class Probes:
    """The checks behind --health-port (vkpy.api.health): what this replica is doing
    now, as its host says."""

    def __init__(self, settings: Settings, host: Probed) -> None:
        self._settings = settings
        self._host = host
        self._started = time.monotonic()

    def loops(self) -> str | None:
        """Liveness: the loops in charge (node status, or the Lease tries) keep turning."""
        now = time.monotonic()
        controllers = self._host.controllers()
        if controllers:
            limit = max(60.0, 6 * self._settings.node.check_interval)
            for controller in controllers:
                last = controller.last_loop_at
                if last is not None and now - last > limit:
                    return f"a node status loop has not turned for {now - last:.0f} s"
            return None
        elector = self._host.elector
        if elector is not None:
            last = elector.last_try_at
            election = self._settings.election
            limit = max(60.0, 10 * (election.retry_period if election else 2.0))
            if now - (last if last is not None else self._started) > limit:
                return "the leader election loop has not turned"
        return None

    def api(self) -> str | None:
        """Readiness: the API server answers, the nodes run here are registered, and
        the node's serving certificate is issued (a node that cannot serve `kubectl
        logs`/`exec` yet is not ready, so `helm install --wait` does not report
        success before it is: issue 27)."""
        controllers = self._host.controllers()
        if controllers:
            waiting = sum(not c.registered.is_set() for c in controllers)
            if waiting:
                return f"{waiting} of {len(controllers)} nodes not registered yet"
            error = next((c.api_error for c in controllers if c.api_error), None)
            return error or self._serving()
        if self._host.sharing:
            return None
        elector = self._host.elector
        if elector is not None and elector.last_try_at is not None and not elector.is_leader():
            return elector.last_error  # a standby: ready while it reaches the API server
        return "starting"  # not tried yet, or leading but not running the node yet

    def _serving(self) -> str | None:
        certificate = self._host.certificate()
        if certificate is None or certificate.issued.is_set():
            return None
        if certificate.pending:
            return (
                f"serving certificate not issued yet: kubectl certificate approve "
                f"{certificate.pending}"
            )
        return "serving certificate not issued yet"


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


async def _connected(client: KubeClient, settings: Settings) -> bool:
    """Wait for the API server and log "connected", or log why not."""
    try:
        version = await wait_for_api(client, settings.startup_timeout)
    except ApiError as error:
        log.error("cannot reach the API server", extra={"error": str(error)})
        return False
    log.info("connected", extra={"server": client.host, "version": version, **_about(settings)})
    return True


async def _serve(settings: Settings, client: KubeClient, host: NodeHost) -> int:
    """Run the host until a signal or its end; the process exit status."""
    if not await _connected(client, settings):
        return 1
    try:
        health = await _start_health(settings, Probes(settings, host))
    except OSError as error:
        log.error("cannot listen on --health-port", extra={"error": str(error)})
        return 1
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    task = asyncio.create_task(host.run(), name="host")
    stopper = asyncio.create_task(stop.wait(), name="signals")
    try:
        await asyncio.wait({task, stopper}, return_when=asyncio.FIRST_COMPLETED)
        if stop.is_set():
            log.info("stopping", extra=_about(settings))
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
        if health is not None:
            await health.close()
