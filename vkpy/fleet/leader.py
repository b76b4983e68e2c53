"""Leader election among vkpy replicas that serve one virtual node, on a Lease.

With `replicaCount: 2` or more, exactly one replica may run the node and pod
controllers and serve the kubelet API; the others wait, and one takes over when the
leader dies or is cut off. Kubernetes is the coordinator: a `coordination.k8s.io`
Lease names the holder, and the rules are the ones every Kubernetes controller uses
(a holder renews every `retry_period`; a candidate takes the Lease only once it has
seen it unchanged for `lease_duration` on its own clock, or when it is released).

Write fencing: the holder counts its right to write from the moment it *sent* its
last successful renewal and gives it up `renew_deadline` later (less than
`lease_duration`), so a replica that can no longer renew stops writing node and pod
status before any other replica may start, by at least `lease_duration -
renew_deadline` seconds. `write_budget()` is what the API client's write gate reads
(vkpy.kube.client.KubeClient.fenced): a write is refused once the budget is spent and
no write request outlives it. A leader that stops (SIGTERM) releases the Lease so a
standby takes over at its next try instead of waiting for the Lease to expire.

The Lease of one node's replicas is an object of its own, never in kube-node-lease:
there the node's heartbeat Lease (vkpy.node.heartbeat.lease) names the node as its holder, and
the leader renews it; a leader Lease that is, or may be, one of those would be taken
from the leader by its own heartbeat (issue 27). `apart_from_node_leases` refuses it.

The same elector, one per node, shares a node set among replicas (vkpy.fleet.sharded): there
the Lease is deliberately the node's own heartbeat Lease in kube-node-lease, so holding
a node costs the API server no more than a kubelet's renewals. For that the Lease can carry
labels and an owner, a caller that lists Leases can hand what it read to `observe`
(and to `try_acquire_or_renew`) instead of reading each one again, and a holder
renews with a PUT of the Lease it last wrote, reading it only after a conflict.
"""

from __future__ import annotations

import asyncio
import logging
import math
import random
from collections.abc import Awaitable, Callable

from vkpy.core.clock import SYSTEM_CLOCK, Clock, utcnow
from vkpy.core.objects import KubeObject, meta, spec
from vkpy.core.rfc3339 import format_micro
from vkpy.fleet.settings import ElectionSettings
from vkpy.kube.client import ApiError, KubeClient
from vkpy.node.heartbeat.lease import NAMESPACE as NODE_LEASES

log = logging.getLogger(__name__)


def apart_from_node_leases(settings: ElectionSettings) -> None:
    """Refuse (ValueError) a leader Lease for one node's replicas in kube-node-lease,
    where every node's heartbeat Lease is, renewed by the node (the leader) with the
    node's name as holder: whatever its name, it is or may become one of them."""
    if settings.namespace == NODE_LEASES:
        raise ValueError(
            f"the leader Lease {settings.namespace}/{settings.name} must not be in "
            f"{NODE_LEASES}, where the nodes' heartbeat Leases are (it could be one of "
            "them, renewed by the node): give the leader Lease a namespace of its own"
        )


class LeadershipLost(Exception):
    """This replica could not renew its Lease in time, or another replica holds it."""


def _observed(lease: KubeObject) -> tuple[str, str, object]:
    """What changes each time the holder renews: a candidate restarts its wait then."""
    s = spec(lease)
    return (
        str(s.get("holderIdentity") or ""),
        str(s.get("renewTime") or ""),
        s.get("leaseDurationSeconds"),
    )


class LeaderElector:
    """Acquires, renews and releases one Lease; see the module docstring."""

    def __init__(
        self,
        client: KubeClient,
        settings: ElectionSettings,
        clock: Clock = SYSTEM_CLOCK,
        owner: Callable[[], KubeObject | None] = lambda: None,
    ) -> None:
        """`owner`: the ownerReference to write on the Lease, when there is one yet
        (a node's Lease is owned by its Node, so it goes when the Node goes)."""
        self._client = client
        self._owner = owner
        self._last: KubeObject | None = None
        """The Lease as this replica last wrote it, while it holds it."""
        self._settings = settings
        self._clock = clock
        self._collection = f"/apis/coordination.k8s.io/v1/namespaces/{settings.namespace}/leases"
        self._path = f"{self._collection}/{settings.name}"
        self._valid_until = -math.inf
        self._seen: tuple[str, str, object] | None = None
        self._seen_at = 0.0
        self.last_try_at: float | None = None
        """When this replica last tried to acquire or renew (monotonic), for /healthz."""
        self.last_error: str | None = None
        """Why the last try could not reach the API server (None: it could), for /readyz."""

    @property
    def identity(self) -> str:
        return self._settings.identity

    def write_budget(self) -> float:
        """Seconds this replica may still write as the leader; <= 0: it may not."""
        return self._valid_until - self._clock.monotonic()

    def is_leader(self) -> bool:
        return self.write_budget() > 0

    def holder(self) -> str:
        """The holder this replica last saw ("" if none or not yet read)."""
        return self._seen[0] if self._seen else ""

    def observe(self, lease: KubeObject) -> None:
        """The Lease as someone else read it just now (a list of many Leases)."""
        seen = _observed(lease)
        if seen != self._seen:
            self._seen, self._seen_at = seen, self._clock.monotonic()

    def vacant(self) -> bool:
        """Whether a try would take the Lease now as far as this replica knows: never
        seen, free, its own, or unchanged for its duration on this replica's clock."""
        return self._clock.monotonic() >= self.vacant_at()

    def vacant_at(self) -> float:
        """When (monotonic) the Lease, as last seen, becomes takeable (-inf: now)."""
        if self._seen is None or self._seen[0] in ("", self.identity):
            return -math.inf
        duration = self._seen[2]
        wait = self._settings.lease_duration
        if isinstance(duration, int | float):
            wait = float(duration)
        return self._seen_at + wait

    async def run(self, lead: Callable[[], Awaitable[None]]) -> None:
        """Wait until this replica holds the Lease, then run `lead()` while renewing it.

        Raises LeadershipLost (after cancelling `lead`) when the Lease could not be
        renewed within the renew deadline; returns when `lead` returns. Cancelling
        `run` cancels `lead`; call `release` afterwards to hand over at once."""
        await self._acquire()
        log.info(
            "became the leader",
            extra={"lease": self._path, "identity": self.identity},
        )
        await self.hold(lead)

    async def hold(self, lead: Callable[[], Awaitable[None]], spread: bool = False) -> None:
        """Run `lead()` while renewing the Lease this replica holds now (after a
        successful `try_acquire_or_renew`); as `run` from there. `spread`: the first
        renewal comes at a random point of the retry period, so the Leases of many
        nodes taken at once are not renewed in bursts ever after."""
        leading = asyncio.create_task(_as_coroutine(lead), name="leading")
        keeping = asyncio.create_task(self._keep(spread), name="lease-renewal")
        try:
            done, _ = await asyncio.wait({leading, keeping}, return_when=asyncio.FIRST_COMPLETED)
            if keeping in done:
                leading.cancel()
                await asyncio.gather(leading, return_exceptions=True)
                keeping.result()  # raises LeadershipLost
            leading.result()
        finally:
            for task in (leading, keeping):
                task.cancel()
            await asyncio.gather(leading, keeping, return_exceptions=True)

    async def _acquire(self) -> None:
        while True:
            try:
                if await self.try_acquire_or_renew():
                    return
            except ApiError as error:
                log.warning("cannot read or take the leader Lease", extra={"error": str(error)})
            await self._clock.sleep(self._settings.retry_period)

    async def _keep(self, spread: bool = False) -> None:
        """Renew every retry period; raise LeadershipLost once the budget is spent."""
        period = self._settings.retry_period
        first = random.uniform(0, period) if spread else period
        while True:
            await self._clock.sleep(min(first, max(0.0, self.write_budget())))
            first = period
            if self.write_budget() <= 0:
                break
            try:
                async with asyncio.timeout(self.write_budget()):
                    renewed = await self.try_acquire_or_renew()
            except (ApiError, TimeoutError) as error:
                log.warning("leader Lease renewal failed", extra={"error": str(error)})
                continue
            if not renewed and self.holder() not in ("", self.identity):
                self._valid_until = -math.inf
                break
        lease = f"{self._settings.namespace}/{self._settings.name}"
        if self.holder() in ("", self.identity):
            raise LeadershipLost(
                f"leader Lease {lease} not renewed within {self._settings.renew_deadline} s"
            )
        raise LeadershipLost(f"leader Lease {lease} lost: {self.holder()} holds it now")

    def _body(self, current: KubeObject | None, now: str) -> KubeObject:
        old = spec(current) if current is not None else {}
        old_meta = meta(current) if current is not None else {}
        ours = old.get("holderIdentity") == self.identity
        transitions = int(old.get("leaseTransitions") or 0)
        metadata: KubeObject = {"name": self._settings.name, "namespace": self._settings.namespace}
        labels = {**(old_meta.get("labels") or {}), **self._settings.labels}
        if labels:
            metadata["labels"] = labels
        owner = self._owner()
        owners = [owner] if owner is not None else old_meta.get("ownerReferences")
        if owners:
            metadata["ownerReferences"] = owners
        body: KubeObject = {
            "apiVersion": "coordination.k8s.io/v1",
            "kind": "Lease",
            "metadata": metadata,
            "spec": {
                "holderIdentity": self.identity,
                "leaseDurationSeconds": math.ceil(self._settings.lease_duration),
                "acquireTime": old.get("acquireTime") if ours else now,
                "renewTime": now,
                "leaseTransitions": transitions if ours or current is None else transitions + 1,
            },
        }
        if current is not None:
            body["metadata"]["resourceVersion"] = meta(current).get("resourceVersion")
        return body

    async def try_acquire_or_renew(self, current: KubeObject | None = None) -> bool:
        """One try: True when this replica holds the Lease afterwards. `current`: the
        Lease as just read by the caller (a list), so this try does not read it again."""
        self.last_try_at = self._clock.monotonic()
        try:
            if current is None and self._last is not None and self.is_leader():
                sent = self._clock.monotonic()  # the budget counts from sending
                try:  # renewing: the Lease as we wrote it, unless someone wrote since
                    return self._took(await self._client.replace(self._path, self._renewed()), sent)
                except ApiError as error:
                    if not error.conflict:
                        raise
                    self._last = None  # read it, and decide again
            held = await self._try(current)
        except ApiError as error:
            self.last_error = str(error)
            raise
        self.last_error = None
        return held

    def _renewed(self) -> KubeObject:
        assert self._last is not None
        return self._body(self._last, format_micro(utcnow(self._clock)))

    async def _try(self, current: KubeObject | None) -> bool:
        started = self._clock.monotonic()
        now = format_micro(utcnow(self._clock))
        try:
            if current is None:
                current = await self._client.get(self._path)
        except ApiError as error:
            if not error.not_found:
                raise
            try:
                created = await self._client.create(self._collection, self._body(None, now))
            except ApiError as create_error:
                if create_error.conflict:
                    return False  # another replica created it first
                raise
            return self._took(created, started)
        seen = _observed(current)
        if seen != self._seen:
            self._seen, self._seen_at = seen, started
        holder = seen[0]
        duration = float(spec(current).get("leaseDurationSeconds") or self._settings.lease_duration)
        if holder not in ("", self.identity) and started < self._seen_at + duration:
            return False  # held by another replica that renewed within its lease
        try:
            updated = await self._client.replace(self._path, self._body(current, now))
        except ApiError as error:
            if error.conflict:
                return False  # someone wrote it in between: read again next time
            raise
        return self._took(updated, started)

    def _took(self, lease: KubeObject, started: float) -> bool:
        self._seen, self._seen_at = _observed(lease), started
        self._valid_until = started + self._settings.renew_deadline
        self._last = lease
        return True

    async def release(self) -> None:
        """Give the Lease up (if still held) so a standby takes over at its next try.

        This replica stops writing first: the budget is spent before the request."""
        self._last = None
        if not self.is_leader():
            self._valid_until = -math.inf
            return
        self._valid_until = -math.inf
        try:
            current = await self._client.get(self._path)
            if spec(current).get("holderIdentity") != self.identity:
                return
            now = format_micro(utcnow(self._clock))
            body = self._body(current, now)
            body["spec"].update(holderIdentity=None, leaseDurationSeconds=1)
            await self._client.replace(self._path, body)
            log.info("released the leader Lease", extra={"lease": self._path})
        except ApiError as error:
            log.warning("could not release the leader Lease", extra={"error": str(error)})


async def _as_coroutine(lead: Callable[[], Awaitable[None]]) -> None:
    await lead()
