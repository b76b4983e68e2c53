"""A node set shared by several replicas, with Kubernetes as the only coordinator.

One process can serve a thousand nodes (vkpy.fleet.host), but one process is one
machine and one failure. With `--leader-elect` and a node set, every replica of a
Deployment is given the same set, and this is its host's membership: it serves the
part of the set whose Leases it holds. Each node's own Lease in kube-node-lease (the
heartbeat the node lifecycle controller reads) names the replica serving it, with
vkpy.fleet.leader's rules and write fencing, so holding a node costs exactly a
kubelet's Lease renewals and nothing new runs (the node gets no LeaseKeeper: that
Lease is its heartbeat).

Each replica also keeps a Lease of its own (`vkpy-set-<set>-<identity>`, labelled
with the set) so the others can count the live replicas. Every retry period a
replica renews that Lease, reads the set's Leases, and follows
vkpy.fleet.shard_plan: it gives back what exceeds its fair share (ceil(nodes /
replicas)) and takes free, released or expired Leases up to it. A watch on the set's
Leases records each change as it arrives, so a Lease's expiry is timed from its
holder's last renewal, not from the round that next reads it; the rounds read the
Leases from that watch (one LIST at its start, not one per round). A replica that dies
stops renewing; once a Lease of it has not changed for its duration it counts as
dead and the others take its nodes, each as its Lease runs out (a timer to the
soonest expiry starts a round), so a node is served again within the lease
duration and the time the API server takes to answer. A node taken over starts
afresh here: its backend (shared by the replicas, as they share a cloud account) is
adopted, its pods come from the one pod watch, which keeps every pod of the set for
this, and nothing is restarted. A node given back stops writing first (its writes
are fenced by its Lease), then releases the Lease, which a replica under its share
takes as the release reaches its watch.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import math
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, replace

from vkpy.core.objects import KubeObject, labels_of, meta, name_of, namespace_of, spec
from vkpy.fleet.host import AT_ONCE, HostedNode, NodeHost, run_logged
from vkpy.fleet.leader import LeaderElector, LeadershipLost
from vkpy.fleet.node_set import SET_LABEL, Member, dns_label, node_set_name
from vkpy.fleet.settings import ElectionSettings, Settings
from vkpy.fleet.shard_plan import Claim, Sightings, fair_share, plan
from vkpy.kube.client import ApiError, KubeClient
from vkpy.kube.watch import Watcher, WatchHandler, WatchOptions
from vkpy.node.heartbeat.lease import NAMESPACE as NODE_LEASES
from vkpy.providers.base import Provider

log = logging.getLogger(__name__)

REPLICA_LABEL = "vkpy.io/node-set-replica"
"""On a replica's own Lease."""
LEASES = "/apis/coordination.k8s.io/v1/namespaces/{}/leases"


def set_name(settings: Settings) -> str:
    """The set's name in labels: from --node-name, the same for every replica."""
    return node_set_name(settings.node.name)


def replica_lease(set_name: str, identity: str) -> str:
    return f"vkpy-set-{set_name}-{dns_label(identity, 100)}"


def in_namespace(lease: KubeObject, namespace: str) -> KubeObject:
    """`lease` as read from `namespace`'s list or watch, its metadata naming the
    namespace: the object itself when it does (it always does from the API server), a
    copy when not; watched objects are never changed in place."""
    if namespace_of(lease):
        return lease
    return {**lease, "metadata": {**meta(lease), "namespace": namespace}}


class _LeaseCache:
    """One namespace's Leases of the set as its watch last saw them (what the rounds
    read), passing each change on to the set's sightings."""

    def __init__(self, namespace: str, sightings: WatchHandler) -> None:
        self.namespace = namespace
        self.items: dict[str, KubeObject] = {}
        self.synced = False
        self._sightings = sightings

    def replace(self, items: list[KubeObject]) -> None:
        items = [in_namespace(lease, self.namespace) for lease in items]
        self.items = {name_of(lease): lease for lease in items}
        self.synced = True
        self._sightings.replace(items)

    def apply(self, event_type: str, obj: KubeObject) -> None:
        obj = in_namespace(obj, self.namespace)
        name = name_of(obj)
        if event_type == "DELETED":
            self.items.pop(name, None)
        else:
            self.items[name] = obj
        self._sightings.apply(event_type, obj)


@dataclass
class _Slot:
    """One node of the set: its Lease's elector, and its parts while served here."""

    member: Member
    elector: LeaderElector
    serving: HostedNode | None = None
    task: asyncio.Task[None] | None = None
    failed_at: float = -math.inf
    """When serving it here last failed (monotonic): not taken again for a Lease
    duration after, so another replica gets it."""

    def held(self) -> bool:
        return self.task is not None and not self.task.done()


class Sharded:
    """This replica's part of a shared node set: the membership of a host
    (vkpy.fleet.host) whose nodes are served while their Leases are held here."""

    sharing = True
    """Serving no node (yet, or for now) is a healthy state."""

    def __init__(self) -> None:
        self._host: NodeHost | None = None
        self.slots: dict[str, _Slot] = {}
        self._others = Sightings()
        self._leases: dict[str, _LeaseCache] = {}
        """The set's Leases by namespace, as the watch last saw them."""
        self._lapsed: dict[str, float] = {}
        """Replicas (by identity) seen letting a node's Lease run out, and when: dead
        for the count until their own Lease changes after that."""
        self._wake = asyncio.Event()
        """Set to start a round before the timer: a Lease of the set was released."""
        self.replicas = 1
        """Live replicas at the last round, this one included."""

    @property
    def elector(self) -> LeaderElector | None:
        return None  # a Lease per node, none for the whole set

    def fence(self, client: KubeClient) -> KubeClient:
        return client  # each node's writes are fenced by its own Lease (_serve)

    def attach(self, host: NodeHost) -> Provider:
        """One elector per node, on the node's Lease; the listener's default backend is
        never started: every pod is routed to the backend of the node that runs it
        (provider_for), served here or not at all."""
        if host.settings.election is None:
            raise ValueError("a shared node set needs leader election settings")
        self._host = host
        self._client = host.client
        self._clock = host.clock
        self._election: ElectionSettings = host.settings.election
        self.set = set_name(host.settings)
        self.identity = self._election.identity
        clock = host.clock
        # The Leases are the set's heartbeat: renewed through the host's heartbeat pool
        # (the kubelet's heartbeat client), so pod work filling the main pool cannot
        # make a replica lose its nodes.
        for member in host.members:
            node_lease = replace(
                self._election,
                namespace=NODE_LEASES,
                name=member.node.name,
                labels={SET_LABEL: self.set},
            )
            owner = functools.partial(self._owner, member.node.name)
            elector = LeaderElector(host.heartbeats, node_lease, clock, owner=owner)
            self.slots[member.node.name] = _Slot(member, elector)
        self._replicas_namespace = self._election.namespace
        self._me = LeaderElector(
            host.heartbeats,
            replace(
                self._election,
                name=replica_lease(self.set, self.identity),
                labels={SET_LABEL: self.set, REPLICA_LABEL: "true"},
            ),
            clock,
        )
        return host.backend(host.members[0])

    @property
    def host(self) -> NodeHost:
        if self._host is None:
            raise RuntimeError("the membership is not attached to a host yet")
        return self._host

    async def lead(self, work: Callable[[], Awaitable[None]]) -> None:
        await work()

    def held(self) -> list[str]:
        """The nodes this replica serves now."""
        return [name for name, slot in self.slots.items() if slot.held()]

    async def serve(self) -> None:
        log.info(
            "sharing the node set",
            extra={"set": self.set, "identity": self.identity, "nodes": len(self.slots)},
        )
        await self.share()

    async def share(self) -> None:
        """Take and give back nodes until cancelled: a round every retry period, or
        sooner when a Lease held elsewhere runs out or is released.

        A watch on the set's Leases (one per namespace they are in, selected by the
        set's label) records each change as it arrives, so a Lease's expiry is timed
        from its holder's last renewal and not from the next round that reads it (up
        to a retry period later); the rounds read the Leases from it, once it has
        listed them, rather than list them again every retry period."""
        async with asyncio.TaskGroup() as nodes:
            for namespace in self._namespaces():
                cache = self._leases[namespace] = _LeaseCache(namespace, self)
                watcher = Watcher(
                    self._client,
                    WatchOptions(
                        path=LEASES.format(namespace),
                        label_selector=self._selector(),
                        resource="leases",
                    ),
                    cache,
                    clock=self._clock,
                )
                name = f"lease-watch/{namespace}"
                nodes.create_task(run_logged(name, watcher.run()), name=name)
            while True:
                try:
                    await self.round(nodes)
                except ApiError as error:
                    log.warning("cannot read the node set's Leases", extra={"error": str(error)})
                await self._pause(self._until_next_round())

    async def _pause(self, seconds: float) -> None:
        """Wait `seconds`, or less if a watched Lease is released meanwhile."""
        timer = self._clock.call_later(seconds, self._wake.set)
        try:
            await self._wake.wait()
        finally:
            timer.cancel()
            self._wake.clear()

    # --- the watch on the set's Leases (vkpy.kube.watch.WatchHandler) ----------------

    def replace(self, items: list[KubeObject]) -> None:
        """The watch's list: each Lease as it is now (gone ones: the rounds forget)."""
        now = self._clock.monotonic()
        for lease in items:
            self._sighted(lease, now)

    def apply(self, event_type: str, obj: KubeObject) -> None:
        """A Lease changed (deletions: the next round's list forgets it)."""
        if event_type == "DELETED":
            return
        self._sighted(obj, self._clock.monotonic())
        slot = self.slots.get(name_of(obj))
        if slot is None or slot.held() or spec(obj).get("holderIdentity"):
            return
        if len(self.held()) < fair_share(len(self.slots), self.replicas):
            self._wake.set()  # released, and this replica is under its share: take it now

    def _sighted(self, lease: KubeObject, now: float) -> str | None:
        """Record a Lease of the set as read at `now`: the holder's name if it is
        another replica's own Lease, else None."""
        name = name_of(lease)
        labels = labels_of(lease)
        holder = str(spec(lease).get("holderIdentity") or "")
        if labels.get(REPLICA_LABEL):
            if holder and holder != self.identity:
                duration = float(spec(lease).get("leaseDurationSeconds") or 0)
                self._others.see(name, (holder, spec(lease).get("renewTime")), duration, now)
                return holder
        elif namespace_of(lease) == NODE_LEASES and name in self.slots:
            self.slots[name].elector.observe(lease)
        return None

    def _until_next_round(self) -> float:
        """The retry period, or less when a Lease seen held elsewhere (or a replica's)
        runs out sooner: a dead replica's nodes are taken the moment its Leases have
        not changed for their duration, not up to a period later."""
        now = self._clock.monotonic()
        soonest = min(
            (
                slot.elector.vacant_at()
                for slot in self.slots.values()
                if not slot.held() and slot.elector.holder() not in ("", self.identity)
            ),
            default=math.inf,
        )
        soonest = min(soonest, self._others.next_expiry(now))
        period = self._election.retry_period
        return max(0.05 * period, min(period, soonest - now + 0.01))

    def _live_others(self, replicas: dict[str, str], now: float) -> int:
        """How many other replicas are alive: their own Lease (name: holder in
        `replicas`) changed within its duration, and they have not let a node's Lease
        run out since it last changed. A replica that died is so counted out the
        moment its first node can be taken, not once its own Lease runs out too (up
        to a retry period later, as it renews that Lease at its rounds): its nodes'
        Leases run out one by one, and the survivors' shares must have grown by then
        to take them."""
        for slot in self.slots.values():
            holder = slot.elector.holder()
            if not slot.held() and holder not in ("", self.identity) and slot.elector.vacant():
                self._lapsed.setdefault(holder, now)
        alive = self._others.alive(now)
        live: set[str] = set()
        for name, holder in replicas.items():
            lapsed = self._lapsed.get(holder)
            if lapsed is not None and self._others.changed_at(name) > lapsed:
                del self._lapsed[holder]  # it renewed its own Lease since: alive
                lapsed = None
            if name in alive and lapsed is None:
                live.add(holder)
        for holder in set(self._lapsed) - set(replicas.values()):
            del self._lapsed[holder]  # its Lease is gone
        return len(live)

    async def round(self, nodes: asyncio.TaskGroup) -> None:
        """One round: renew this replica's Lease, read the set's, give back, take."""
        try:
            await self._me.try_acquire_or_renew()
        except ApiError as error:
            log.warning("cannot renew this replica's Lease", extra={"error": str(error)})
        caches = [self._leases.get(n) for n in self._namespaces()]
        if all(c is not None and c.synced for c in caches):
            listed = [lease for c in caches if c is not None for lease in c.items.values()]
        else:
            listed = await self._list()  # before the watch has listed them
        now = self._clock.monotonic()
        replicas: dict[str, str] = {}
        node_leases: dict[str, KubeObject] = {}
        for lease in listed:
            name = name_of(lease)
            holder = self._sighted(lease, now)
            if holder:
                replicas[name] = holder
            elif namespace_of(lease) == NODE_LEASES and name in self.slots:
                node_leases[name] = lease
        self._others.forget(replicas)
        self.replicas = 1 + self._live_others(replicas, now)
        claims = {
            name: Claim(slot.elector.holder(), slot.elector.vacant())
            for name, slot in self.slots.items()
        }
        failed = {
            name
            for name, slot in self.slots.items()
            if now - slot.failed_at < self._election.lease_duration
        }
        todo = plan(self.identity, list(self.slots), claims, self.replicas, self.held(), failed)
        if todo.give_back:
            log.info(
                "giving nodes back",
                extra={"nodes": len(todo.give_back), "replicas": self.replicas},
            )
            await _each(self._give_back, [self.slots[n] for n in todo.give_back])

        async def take(slot: _Slot) -> None:
            name = slot.member.node.name
            try:
                taken = await slot.elector.try_acquire_or_renew(node_leases.get(name))
            except ApiError as error:
                log.warning("cannot take a node's Lease", extra={"node": name, "error": str(error)})
                return
            if taken:
                slot.task = nodes.create_task(self._serve(slot), name=f"node/{name}")

        if todo.take:
            await _each(take, [self.slots[n] for n in todo.take])
            log.info(
                "took nodes",
                extra={
                    "wanted": len(todo.take),
                    "holding": len(self.held()),
                    "replicas": self.replicas,
                },
            )

    def _selector(self) -> str:
        return f"{SET_LABEL}={self.set}"

    def _namespaces(self) -> list[str]:
        """Where the set's Leases are: the nodes' namespace and the replicas'."""
        return list(dict.fromkeys((NODE_LEASES, self._replicas_namespace)))

    async def _list(self) -> list[KubeObject]:
        selector = {"labelSelector": self._selector()}
        out: list[KubeObject] = []
        for namespace in self._namespaces():
            answer = await self._client.get(LEASES.format(namespace), selector)
            out.extend(in_namespace(item, namespace) for item in answer.get("items") or ())
        return out

    async def _serve(self, slot: _Slot) -> None:
        """Serve one node while its Lease is held here; never raises but on cancel."""
        name = slot.member.node.name
        failed = False
        try:
            # Every write of the node is fenced by its Lease, and that Lease, renewed
            # by the elector, is the node's heartbeat: it gets no LeaseKeeper.
            node = self.host.build(
                slot.member, self._client.fenced(slot.elector.write_budget), keep_lease=False
            )
            slot.serving = node
            log.info("serving node", extra={"node": name})
            await slot.elector.hold(functools.partial(self.host.serve, node), spread=True)
        except LeadershipLost as error:
            log.warning("node lost", extra={"node": name, "error": str(error)})
        except Exception:
            log.exception("node failed; giving it up to another replica", extra={"node": name})
            failed = True
        finally:
            slot.serving = None
        if failed:
            slot.failed_at = self._clock.monotonic()
            await slot.elector.release()  # its writes ended with the node above

    async def _give_back(self, slot: _Slot) -> None:
        """Stop serving the node (its writes end first), then release its Lease."""
        if slot.task is not None:
            slot.task.cancel()
            await asyncio.gather(slot.task, return_exceptions=True)
            slot.task = None
        await slot.elector.release()

    def _owner(self, name: str) -> KubeObject | None:
        """The node's Lease is owned by its Node (once known here), so it goes with it."""
        node = self.slots[name].serving
        if node is None or not node.node.uid:
            return None
        return {"apiVersion": "v1", "kind": "Node", "name": name, "uid": node.node.uid}

    async def stop(self) -> None:
        """After the work: stop every node, then release their Leases and this
        replica's."""
        await _each(self._give_back, [s for s in self.slots.values() if s.task is not None])
        await self._me.release()


async def _each(work: Callable[[_Slot], Awaitable[None]], slots: list[_Slot]) -> None:
    gate = asyncio.Semaphore(AT_ONCE)

    async def one(slot: _Slot) -> None:
        async with gate:
            await work(slot)

    await asyncio.gather(*(one(s) for s in slots))
