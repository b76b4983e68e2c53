"""Wiring: build every part from `Settings` and run them in one asyncio TaskGroup.

This is the only place long-lived tasks are started. Each is named, and when one
ends the runner logs which and why; a crashed task stops the node (and the process
exits non-zero) rather than leaving a half-working kubelet. SIGTERM and SIGINT stop
everything gracefully: tasks are cancelled, queued Events flushed, the backend and
the API client closed. Pods keep running in the backend, to be adopted next time.
"""

from __future__ import annotations

import asyncio
import logging
import signal
import time
from collections.abc import Coroutine

from vkpy.api import ApiDependencies, KubeletServer, ListenError
from vkpy.api.client_ca import cluster_ca
from vkpy.kube.client import ApiError, KubeClient
from vkpy.kube.events import EventRecorder
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
        self.node = NodeController(client, provider, self.events, settings.node)
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
        self.api = KubeletServer(
            settings.api,
            ApiDependencies(
                node_name=settings.node.name,
                addresses=_addresses(settings),
                pods=self.pods.pods,
                find_pod=self.pods.find,
                provider=provider,
                client=client,
                events=self.events,
                default_client_ca=None
                if settings.api.client_ca_file
                else cluster_ca(settings.kube.kubeconfig, settings.kube.context),
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


async def run(settings: Settings) -> int:
    """Run the node until a signal; the process exit status."""
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
        client = await KubeClient.connect(settings.kube)
    except Exception as error:  # the config loaders raise many types
        log.error("cannot load the Kubernetes client configuration", extra={"error": str(error)})
        return 2
    try:
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


async def _serve(settings: Settings, client: KubeClient, provider: Provider) -> int:
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    node = Node(settings, client, provider)
    await provider.start()
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
