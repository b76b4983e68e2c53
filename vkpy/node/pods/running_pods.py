"""The kubelet API's /runningpods/, from what the backend actually runs.

The kubelet lists running pods from its container runtime, not from the API server,
so the list is right even before status reaches the API (and after a pod's backend
state vanished). vkpy asks the backend which pods it holds and what state each is
in, and names the running containers with the images they run.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from vkpy.core.objects import KubeObject, containers_of
from vkpy.providers.base import PodRef, PodState, Provider
from vkpy.providers.errors import NotFoundError

Lookup = Callable[[str], KubeObject | None]
"""The pod object of a UID, if the API server has it (for spec images)."""


async def running_pods(provider: Provider, lookup: Lookup) -> list[KubeObject]:
    """The backend's running pods in the minimal shape the kubelet reports them."""
    refs = list(await provider.list_pods())
    states = await asyncio.gather(*(_state(provider, ref) for ref in refs))
    out: list[KubeObject] = []
    for ref, state in zip(refs, states, strict=True):
        if state is None:
            continue
        pod = lookup(ref.uid)
        images = {str(c.get("name")): c.get("image") for c in (containers_of(pod) if pod else [])}
        containers = [
            {"name": c.name, "image": c.image or images.get(c.name, "")}
            for c in state.containers
            if c.state == "running"
        ]
        if not containers:
            continue
        out.append(
            {
                "metadata": {"name": ref.name, "namespace": ref.namespace, "uid": ref.uid},
                "spec": {"containers": containers},
                "status": {},
            }
        )
    return out


async def _state(provider: Provider, ref: PodRef) -> PodState | None:
    try:
        return await provider.get_pod_status(ref)
    except NotFoundError:
        return None
