"""Who serves which node of a set when several replicas share it: the rules, no I/O.

Replicas of one Deployment run the same node set, and each node is served by the
replica that holds its Lease (vkpy.fleet.leader's rules and write fencing). Nothing
else coordinates them: each replica decides alone, from the Leases it saw, what to
take and what to give back, so the rules must make independent decisions converge:

- the fair share is ceil(nodes / live replicas), live replicas being those whose own
  replica Lease was renewed within its duration (as seen on this replica's clock);
- a replica holding more than its share gives the excess back (released Leases are
  taken at once by whoever is under its share), so a joining replica gets its share;
- a replica under its share takes nodes whose Lease is free, expired or its own,
  preferring the nodes it ranks highest: each replica ranks nodes differently (a hash
  of its identity and the node's name), so replicas rarely race for the same Lease;
- a node that failed on a replica (its backend would not start, its Node could not be
  registered) is released and that replica does not take it again for a while, so
  another replica, perhaps on a machine where it works, gets it.

With every replica seeing the same count, each holds at most its fair share; while
views differ (a replica just joined or died) a replica may hold one share computed
from an older count, which the next rounds correct.
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass


@dataclass(frozen=True)
class Claim:
    """What this replica knows of one node's Lease."""

    holder: str
    """The holder it last saw ("" for none)."""
    vacant: bool
    """Takeable now: free, this replica's own, or not renewed for its duration."""


@dataclass(frozen=True)
class Plan:
    take: tuple[str, ...] = ()
    """Nodes to try to acquire, best first."""
    give_back: tuple[str, ...] = ()
    """Nodes to stop serving and release."""


def fair_share(nodes: int, replicas: int) -> int:
    """The most nodes one replica should hold: ceil(nodes / replicas)."""
    return math.ceil(nodes / max(1, replicas))


def rank(identity: str, node: str) -> int:
    """How much `identity` prefers `node` (rendezvous hashing: stable, spread out)."""
    digest = hashlib.blake2b(f"{identity}\0{node}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big")


def plan(
    identity: str,
    nodes: Sequence[str],
    claims: Mapping[str, Claim],
    replicas: int,
    held: Collection[str],
    avoid: Collection[str] = (),
) -> Plan:
    """What this replica (`identity`, holding `held`) should do now.

    `claims` holds what is known of each node's Lease (a node missing from it has no
    Lease yet: takeable); `replicas` counts the live replicas, this one included;
    `avoid` are nodes not to take now (they failed here)."""
    share = fair_share(len(nodes), replicas)
    mine = [n for n in nodes if n in held]
    if len(mine) > share:
        lowest_first = sorted(mine, key=lambda n: rank(identity, n))
        return Plan(give_back=tuple(lowest_first[: len(mine) - share]))
    want = share - len(mine)
    if want <= 0:
        return Plan()
    takeable = [
        n
        for n in nodes
        if n not in held
        and n not in avoid
        and (n not in claims or claims[n].vacant or claims[n].holder == identity)
    ]
    best_first = sorted(takeable, key=lambda n: rank(identity, n), reverse=True)
    return Plan(take=tuple(best_first[:want]))


class Sightings:
    """When each Lease last changed, on this replica's clock: a holder is alive while
    its Lease changed within its duration (clocks of other machines are never read)."""

    def __init__(self) -> None:
        self._seen: dict[str, tuple[object, float, float]] = {}

    def see(self, name: str, version: object, duration: float, now: float) -> None:
        """The Lease `name` read at `now` with `version` (what changes on renewal)."""
        known = self._seen.get(name)
        if known is None or known[0] != version:
            self._seen[name] = (version, now, duration)
        else:
            self._seen[name] = (version, known[1], duration)

    def changed_at(self, name: str) -> float:
        """When the Lease `name` last changed (-inf: never seen)."""
        known = self._seen.get(name)
        return known[1] if known is not None else -math.inf

    def alive(self, now: float) -> set[str]:
        """The Leases that changed within their duration before `now`."""
        return {name for name, (_, at, duration) in self._seen.items() if now < at + duration}

    def next_expiry(self, now: float) -> float:
        """When the next live holder expires if it does not renew (inf: none live)."""
        return min(
            (at + duration for _, at, duration in self._seen.values() if now < at + duration),
            default=math.inf,
        )

    def forget(self, names: Collection[str]) -> None:
        """Forget Leases that are gone (deleted, or no longer listed)."""
        for name in list(self._seen):
            if name not in names:
                del self._seen[name]
