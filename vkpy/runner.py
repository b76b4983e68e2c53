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
to be adopted next time.
"""

from __future__ import annotations

import asyncio
import logging
import signal
import time
from collections.abc import Coroutine
from dataclasses import replace

from vkpy.api import ApiDependencies, KubeletServer, ListenError
from vkpy.fleet import Fleet
from vkpy.kube.client import ApiError, KubeClient
from vkpy.kube.events import EventRecorder
from vkpy.kube.node_address import node_address_towards
from vkpy.node.backend_events import forward_backend_events
from vkpy.node.background import TaskSupervisor
from vkpy.node.lease import LeaseKeeper
from vkpy.node.node_controller import NodeController
from vkpy.node.pod_config import ApiObjectSource
from vkpy.node.pod_controller import PodController
from vkpy.providers import registry
from vkpy.providers.base import Provider
from vkpy.settings import Settings

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
                ),
            )
        except registry.ProviderConfigError as error:
            log.error("invalid provider configuration", extra={"error": str(error)})
            return 2
        try:
            version = await wait_for_api(client, settings.startup_timeout)
        except ApiError as error:
            log.error("cannot reach the API server", extra={"error": str(error)})
            return 1
        log.info(
            "connected",
            extra={"server": client.host, "version": version, "node": settings.node.name},
        )
        return await _serve(settings, client, provider)
    finally:
        await client.close()


async def _serve_set(settings: Settings, client: KubeClient) -> int:
    """Serve a node set (vkpy.fleet) until a signal; the process exit status."""
    try:
        fleet = Fleet(settings, client)
    except registry.ProviderConfigError as error:
        log.error("invalid provider configuration", extra={"error": str(error)})
        return 2
    try:
        version = await wait_for_api(client, settings.startup_timeout)
    except ApiError as error:
        log.error("cannot reach the API server", extra={"error": str(error)})
        return 1
    log.info(
        "connected",
        extra={"server": client.host, "version": version, "nodes": len(fleet.nodes)},
    )
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    await fleet.start_backends()
    task = asyncio.create_task(fleet.run(), name="fleet")
    stopper = asyncio.create_task(stop.wait(), name="signals")
    try:
        await asyncio.wait({task, stopper}, return_when=asyncio.FIRST_COMPLETED)
        if stop.is_set():
            log.info("stopping", extra={"nodes": len(fleet.nodes)})
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
        await fleet.events.flush(2.0)
        await fleet.close_backends()
        log.info("stopped", extra={"nodes": len(fleet.nodes)})


async def _serve(settings: Settings, client: KubeClient, provider: Provider) -> int:
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    node = Node(settings, client, provider)
    await provider.start()
    node.tasks.add_from(provider)
    task = asyncio.create_task(node.run(), name="node")
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
        except BaseExceptionGroup:
            return 1
        return 1
    finally:
        stopper.cancel()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.remove_signal_handler(sig)
        await node.events.flush(2.0)
        await provider.close()
        log.info("stopped", extra={"node": settings.node.name})
