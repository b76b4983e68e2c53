"""The node's Lease in kube-node-lease: the cheap heartbeat the control plane watches.

The node lifecycle controller marks a node Unknown when its Lease stops being renewed,
so this loop renews `kube-node-lease/<node>` every `renew_interval` seconds with a
`lease_duration` of 40 s, owned by the Node (so it goes when the Node goes). It
creates the Lease when missing.

A renewal is one merge patch of the renew time, with no resourceVersion: nothing
else writes a node's Lease, so there is nothing to guard against, and on a loaded
API server a renewal the client gave up on (a timeout) still lands later. With a
read-modify-write update (PUT at the resourceVersion last read), the next renewal
then conflicted with that late write and was read and written again: 1000 nodes
cost 131 Lease writes a second instead of 100 (issue 17). A patch costs one write
per renewal, whatever became of the one before.
"""

from __future__ import annotations

import logging
import random
from collections.abc import Callable
from datetime import datetime

from vkpy.core.clock import SYSTEM_CLOCK, Clock, utcnow
from vkpy.core.objects import KubeObject
from vkpy.core.rfc3339 import format_micro
from vkpy.kube.client import MERGE_PATCH, ApiError, KubeClient

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
        spread: bool = False,
        clock: Clock = SYSTEM_CLOCK,
        may_exist: Callable[[], bool] = lambda: False,
    ) -> None:
        """`spread`: the second renewal comes a random part of the interval after the
        first (never later than the interval), so the Leases of many nodes in one process
        are renewed evenly over the interval rather than in the bursts they registered in.
        `may_exist`, asked when `run` starts: whether the Lease is likely there already
        (the Node was, e.g. the agent restarted); then the first renewal is the patch
        (a 404 creates it), not a create answered 409 and then the patch."""
        self._client = client
        self._name = node_name
        self._node_uid = node_uid
        self._duration = duration
        self._interval = renew_interval
        self._spread = spread
        self._clock = clock
        self._path = f"/apis/coordination.k8s.io/v1/namespaces/{NAMESPACE}/leases/{node_name}"
        self._exists = False
        self._may_exist = may_exist
        self.renewals = 0

    async def run(self) -> None:
        """Renew every `renew_interval` s on a fixed schedule: a slow answer does not push
        the next renewal back (sleeping a whole interval after each answer made a loaded
        API server's Leases drift late)."""
        self._exists = self._may_exist()
        due = self._clock.monotonic()
        first = True
        while True:
            try:
                await self.renew()
            except ApiError as error:
                log.warning("lease renewal failed", extra={"node": self._name, "error": str(error)})
            step = random.uniform(0, self._interval) if first and self._spread else self._interval
            first = False
            due += step
            now = self._clock.monotonic()
            while due <= now:  # late (a slow API server): the next point of the schedule
                due += self._interval
            await self._clock.sleep(due - now)

    def _desired(self) -> KubeObject:
        return {
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
            "spec": self._spec(),
        }

    def _spec(self) -> KubeObject:
        return {
            "holderIdentity": self._name,
            "leaseDurationSeconds": self._duration,
            "renewTime": micro_time(utcnow(self._clock)),
        }

    async def renew(self) -> None:
        """One renewal: a merge patch of the Lease, created first when missing."""
        try:
            await self._renew()
        except ApiError as error:
            if not error.not_found:
                raise
            self._exists = False  # deleted (or its Node was): create it again now
            await self._renew()

    async def _renew(self) -> None:
        if not self._exists:
            try:  # the body, renew time and all, is made when the create goes out
                await self._client.create_at_send(
                    f"/apis/coordination.k8s.io/v1/namespaces/{NAMESPACE}/leases",
                    self._desired,
                    decode=False,
                )
                self._exists = True
                self.renewals += 1
                return
            except ApiError as error:
                if not error.conflict:  # 409 AlreadyExists
                    raise
                self._exists = True  # there from before: renew it
        # The renew time is taken when the patch goes out: in a process of many nodes a
        # renewal may wait for a turn among the heartbeats, and a time taken before the
        # wait made a Lease renewed on schedule look late by it. The answer (the whole
        # Lease) is not used: read, not decoded.
        await self._client.patch_at_send(
            self._path, lambda: {"spec": self._spec()}, MERGE_PATCH, decode=False
        )
        self.renewals += 1
