"""Sharing a node set among replicas: the rules that decide who takes which node.

A small model of the API server's Leases (compare-and-swap on a version, time moved
by hand) runs several replicas' rounds with the real `plan` and `Sightings`: they
split the set evenly, no node is ever held by two replicas, a dead replica's nodes
are taken within the lease duration plus a round or two, and a joining replica gets
its share from the others."""

from __future__ import annotations

from dataclasses import dataclass, field

from vkpy.fleet.shard_plan import Claim, Plan, Sightings, fair_share, plan, rank

DURATION = 8.0
"""Seconds a Lease stays valid after its last renewal (the model's lease duration)."""
ROUND = 1.0
"""Seconds between a replica's rounds (its retry period)."""


def test_fair_share_is_the_ceiling() -> None:
    assert fair_share(30, 3) == 10
    assert fair_share(31, 3) == 11
    assert fair_share(30, 0) == 30
    assert fair_share(300, 7) == 43


def test_gives_back_what_exceeds_the_share_lowest_ranked_first() -> None:
    nodes = [f"n{i}" for i in range(12)]
    held = set(nodes[:8])
    claims = {n: Claim("a", False) for n in held}
    got = plan("a", nodes, claims, replicas=2, held=held)
    assert got.take == ()
    assert len(got.give_back) == 2
    kept = held - set(got.give_back)
    assert min(rank("a", n) for n in kept) > max(rank("a", n) for n in got.give_back)


def test_takes_only_free_expired_or_own_leases_up_to_the_share() -> None:
    nodes = ["free", "expired", "mine", "busy", "unknown"]
    claims = {
        "free": Claim("", True),
        "expired": Claim("b", True),
        "mine": Claim("a", False),  # an earlier life of this replica holds it
        "busy": Claim("b", False),
    }
    got = plan("a", nodes, claims, replicas=1, held=set())
    assert set(got.take) == {"free", "expired", "mine", "unknown"}
    assert plan("a", nodes, claims, replicas=2, held=set()) == Plan(
        take=tuple(sorted(got.take, key=lambda n: rank("a", n), reverse=True)[:3])
    )
    assert plan("a", nodes, claims, replicas=2, held={"free", "mine", "unknown"}) == Plan()
    # a node that failed here is left for another replica, even one released as its own
    avoided = plan("a", nodes, claims, replicas=1, held=set(), avoid={"free", "mine"})
    assert set(avoided.take) == {"expired", "unknown"}


def test_sightings_count_a_holder_alive_while_its_lease_changes() -> None:
    seen = Sightings()
    seen.see("r1", ("r1", "t0"), DURATION, now=0.0)
    seen.see("r1", ("r1", "t0"), DURATION, now=7.0)  # read again, unchanged
    assert seen.alive(7.5) == {"r1"}
    assert seen.alive(8.0) == set()  # unchanged for its whole duration: dead
    seen.see("r1", ("r1", "t1"), DURATION, now=9.0)  # renewed after all
    assert seen.alive(9.0) == {"r1"}
    seen.forget([])
    assert seen.alive(9.0) == set()


# --- a model of the API server's Leases and of replicas running rounds --------------


@dataclass
class Lease:
    holder: str = ""
    version: int = 0


@dataclass
class Replica:
    identity: str
    held: set[str] = field(default_factory=set)
    sightings: Sightings = field(default_factory=Sightings)
    node_seen: dict[str, tuple[tuple[str, int], float]] = field(default_factory=dict)
    alive: bool = True

    def claims(self, leases: dict[str, Lease], now: float) -> dict[str, Claim]:
        out = {}
        for name, lease in leases.items():
            version = (lease.holder, lease.version)
            if self.node_seen.get(name, (None, 0.0))[0] != version:
                self.node_seen[name] = (version, now)
            changed_at = self.node_seen[name][1]
            vacant = lease.holder in ("", self.identity) or now >= changed_at + DURATION
            out[name] = Claim(lease.holder, vacant)
        return out


class Cluster:
    def __init__(self, nodes: int) -> None:
        self.nodes = [f"node-{i}" for i in range(nodes)]
        self.leases = {n: Lease() for n in self.nodes}
        self.replica_leases: dict[str, Lease] = {}
        self.replicas: list[Replica] = []
        self.now = 0.0

    def join(self, identity: str) -> Replica:
        replica = Replica(identity)
        self.replicas.append(replica)
        return replica

    def renew(self, lease: Lease, holder: str) -> None:
        lease.holder = holder
        lease.version += 1

    def round(self, me: Replica) -> None:
        """One round of one replica, as vkpy.fleet.sharded does it."""
        self.renew(self.replica_leases.setdefault(me.identity, Lease()), me.identity)
        names = set()
        for name, lease in self.replica_leases.items():
            if name != me.identity and lease.holder:
                me.sightings.see(name, (lease.holder, lease.version), DURATION, self.now)
                names.add(name)
        me.sightings.forget(names)
        replicas = 1 + len(me.sightings.alive(self.now))
        for name in list(me.held):  # renewals (held Leases are renewed every round)
            self.renew(self.leases[name], me.identity)
        todo = plan(me.identity, self.nodes, me.claims(self.leases, self.now), replicas, me.held)
        for name in todo.give_back:
            me.held.discard(name)
            self.leases[name].holder = ""
            self.leases[name].version += 1
        for name in todo.take:
            # compare-and-swap: taken only if still as this replica last saw it
            seen_version = me.node_seen[name][0]
            lease = self.leases[name]
            if (lease.holder, lease.version) == seen_version:
                self.renew(lease, me.identity)
                me.held.add(name)

    def run(self, seconds: float) -> None:
        end = self.now + seconds
        while self.now < end:
            for replica in self.replicas:
                if replica.alive:
                    self.round(replica)
            self.check_no_node_held_twice()
            self.now += ROUND

    def check_no_node_held_twice(self) -> None:
        live = [r for r in self.replicas if r.alive]
        for node in self.nodes:
            holders = [r.identity for r in live if node in r.held]
            assert len(holders) <= 1, (node, holders)
            if holders:
                assert self.leases[node].holder == holders[0]

    def counts(self) -> dict[str, int]:
        return {r.identity: len(r.held) for r in self.replicas if r.alive}


def test_three_replicas_split_thirty_nodes_evenly() -> None:
    cluster = Cluster(30)
    for name in ("a", "b", "c"):
        cluster.join(name)
    cluster.run(DURATION + 5 * ROUND)
    assert cluster.counts() == {"a": 10, "b": 10, "c": 10}


def test_a_dead_replicas_nodes_are_taken_within_the_lease_duration_and_two_rounds() -> None:
    cluster = Cluster(30)
    a, b, c = (cluster.join(n) for n in ("a", "b", "c"))
    cluster.run(DURATION + 5 * ROUND)
    orphans = set(c.held)
    c.alive = False  # SIGKILL: no release, no more renewals
    killed_at = cluster.now
    while not orphans <= a.held | b.held:
        assert cluster.now - killed_at <= DURATION + 2 * ROUND, "not taken over in time"
        cluster.run(ROUND)
    assert cluster.counts() == {"a": 15, "b": 15}
    assert a.held.isdisjoint(b.held)


def test_a_joining_replica_gets_its_share_from_the_others() -> None:
    cluster = Cluster(30)
    a, b = cluster.join("a"), cluster.join("b")
    cluster.run(DURATION + 5 * ROUND)
    assert cluster.counts() == {"a": 15, "b": 15}
    cluster.join("c")
    cluster.run(5 * ROUND)  # no waiting for a lease to expire: the others give back
    assert cluster.counts() == {"a": 10, "b": 10, "c": 10}
    assert len(a.held | b.held | cluster.replicas[2].held) == 30


def test_uneven_sets_hold_at_most_one_more_than_the_smallest() -> None:
    cluster = Cluster(31)
    for name in ("a", "b", "c"):
        cluster.join(name)
    cluster.run(DURATION + 8 * ROUND)
    counts = sorted(cluster.counts().values())
    assert sum(counts) == 31
    assert counts[-1] <= fair_share(31, 3)
