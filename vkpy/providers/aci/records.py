"""What the `aci` backend remembers of each pod's container group.

One record per pod UID: the group's name, the spec digest it was created with, the
notes of the mapping, and the group as last read with its instance view (what
`get_pod_status` answers from, so the kubelet side's reads cost ARM nothing). The
monitor refreshes it; ACI's events already reported are remembered so each becomes
one pod Event.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field

from azure.mgmt.containerinstance import models as m

from vkpy.providers.aci.group_spec import GroupSpec
from vkpy.providers.base import PodEvent, PodRef, PodState
from vkpy.providers.errors import ProviderError


@dataclass
class GroupRecord:
    ref: PodRef
    name: str
    digest: str = ""
    notes: tuple[str, ...] = ()
    group: m.ContainerGroup | None = None
    """As last read by GET (with instance views), or from a list (without)."""
    fetched_at: float = 0.0
    """Monotonic time of the last GET; 0 when the instance view was never read."""
    created_at: float = 0.0
    state: PodState | None = None
    deleting: bool = False
    gone: bool = False
    """ACI no longer has the group (deleted behind vkpy's back)."""
    follower: asyncio.Task[None] | None = None
    """The task following the deployment's long-running operation, while it runs."""
    failure: ProviderError | None = None
    """Why the deployment's long-running operation failed (ACI's code and message)."""
    spec: GroupSpec | None = None
    """What the group was created from (to deploy it again after a capacity failure)."""
    accepted: bool = True
    """Whether ARM accepted the group's PUT (False: refused for want of capacity or
    quota, deployed again with back-off; ACI has no group to read meanwhile)."""
    attempts: int = 1
    """Deployments of this spec so far (retries after capacity or quota failures)."""
    events_seen: dict[tuple[str, str, str], int] = field(default_factory=dict)
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)

    @property
    def container_names(self) -> tuple[str, ...]:
        if self.group is None:
            return ()
        return tuple(str(c.name) for c in self.group.containers or []) + tuple(
            str(c.name) for c in self.group.init_containers or []
        )

    def new_events(self) -> list[PodEvent]:
        """ACI's events not reported yet (a repeat counts as a new one)."""
        out: list[PodEvent] = []
        group = self.group
        if group is None:
            return out
        sources: list[tuple[str | None, list[m.Event]]] = []
        if group.instance_view is not None:
            sources.append((None, list(group.instance_view.events or [])))
        containers: list[m.Container | m.InitContainerDefinition] = [
            *(group.init_containers or []),
            *(group.containers or []),
        ]
        for c in containers:
            if c.instance_view is not None:
                sources.append((str(c.name), list(c.instance_view.events or [])))
        for container, events in sources:
            for event in events:
                key = (container or "", str(event.name), str(event.message))
                count = event.count or 1
                if self.events_seen.get(key, 0) >= count:
                    continue
                self.events_seen[key] = count
                message = str(event.message or "")
                if event.type == "Warning":
                    out.append(PodEvent("Warning", str(event.name), message, container))
                else:
                    out.append(PodEvent("Normal", str(event.name), message, container))
        return out
