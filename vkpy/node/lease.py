"""The node's Lease in kube-node-lease: the cheap heartbeat the control plane watches.

The node lifecycle controller marks a node Unknown when its Lease stops being renewed,
so this loop renews `kube-node-lease/<node>` every `renew_interval` seconds with a
`lease_duration` of 40 s, owned by the Node (so it goes when the Node goes). It
creates the Lease when missing and, on a conflict, reads it again and retries.
"""

from __future__ import annotations

import asyncio
import logging
import random
import time
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime

from vkpy.kube.client import ApiError, KubeClient
from vkpy.objects import KubeObject, meta
from vkpy.rfc3339 import format_micro

log = logging.getLogger(__name__)

NAMESPACE = "kube-node-lease"


def micro_time(now: datetime) -> str:
    """metav1.MicroTime: RFC 3339 with microseconds."""
    return format_micro(now)


class LeaseKeeper:
    def __init__(
        self,
        client: KubeClient,
        node_name: str,
        node_uid: Callable[[], str],
        duration: int = 40,
        renew_interval: float = 10.0,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
        spread: bool = False,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        """`spread`: the second renewal comes a random part of the interval after the
        first (never later than the interval), so the Leases of many nodes in one process
        are renewed evenly over the interval rather than in the bursts they registered in."""
        self._client = client
        self._name = node_name
        self._node_uid = node_uid
        self._duration = duration
        self._interval = renew_interval
        self._sleep = sleep
        self._spread = spread
        self._monotonic = monotonic
        self._path = f"/apis/coordination.k8s.io/v1/namespaces/{NAMESPACE}/leases/{node_name}"
        self._lease: KubeObject | None = None
        self.renewals = 0

    async def run(self) -> None:
        """Renew every `renew_interval` s on a fixed schedule: a slow answer does not push
        the next renewal back (sleeping a whole interval after each answer made a loaded
        API server's Leases drift late)."""
        due = self._monotonic()
        first = True
        while True:
            try:
                await self.renew()
            except ApiError as error:
                log.warning("lease renewal failed", extra={"node": self._name, "error": str(error)})
                self._lease = None
            step = random.uniform(0, self._interval) if first and self._spread else self._interval
            first = False
            due += step
            now = self._monotonic()
            while due <= now:  # late (a slow API server): the next point of the schedule
                due += self._interval
            await self._sleep(due - now)

    def _desired(self, base: KubeObject | None) -> KubeObject:
        lease: KubeObject = {
            "apiVersion": "coordination.k8s.io/v1",
            "kind": "Lease",
            "metadata": {
                "name": self._name,
                "namespace": NAMESPACE,
                "ownerReferences": [
                    {
                        "apiVersion": "v1",
                        "kind": "Node",
                        "name": self._name,
                        "uid": self._node_uid(),
                    }
                ],
            },
            "spec": {
                "holderIdentity": self._name,
                "leaseDurationSeconds": self._duration,
                "renewTime": micro_time(datetime.now(UTC)),
            },
        }
        if base is not None:
            lease["metadata"]["resourceVersion"] = meta(base).get("resourceVersion")
        return lease

    async def renew(self) -> None:
        """One renewal: update the known Lease, or read/create it; retry conflicts."""
        for _ in range(5):
            try:
                if self._lease is None:
                    self._lease = await self._get_or_create()
                    if self._lease is not None:
                        self.renewals += 1
                        return
                self._lease = await self._client.replace(self._path, self._desired(self._lease))
                self.renewals += 1
                return
            except ApiError as error:
                if not (error.conflict or error.not_found):
                    raise
                self._lease = None
        raise ApiError(409, "Conflict", "lease kept changing under us")

    async def _get_or_create(self) -> KubeObject | None:
        """The current Lease (None: renew it next), or a newly created one."""
        try:
            current = await self._client.get(self._path)
        except ApiError as error:
            if not error.not_found:
                raise
            return await self._client.create(
                f"/apis/coordination.k8s.io/v1/namespaces/{NAMESPACE}/leases", self._desired(None)
            )
        self._lease = current
        return await self._client.replace(self._path, self._desired(current))
