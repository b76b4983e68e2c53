"""A shared node set's takeover timing (issue 17: a dead replica's nodes taken within
the lease duration plus one renewal): a replica times a peer's node Lease from the
moment the Lease last changed, as its watch on the set's Leases delivers the change,
not from the round in which it next lists them (up to a retry period later), and it
takes the node as soon as that duration has passed."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest

from tests.unit.app.test_cli import settings
from tests.unit.fake_clock import FakeClock, settle
from tests.unit.fake_kube import FakeKube, ts
from vkpy.fleet.host import NodeHost
from vkpy.fleet.sharded import Sharded
from vkpy.kube.client import ApiError

LEASES = "/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases"
NODE_LEASE = f"{LEASES}/s-0"
DURATION = 40  # the defaults of a shared set: Lease 40 s, rounds every 10 s


def node_lease(
    holder: str, renewed: float, version: str | None = None, name: str = "s-0"
) -> dict[str, Any]:
    lease: dict[str, Any] = {
        "apiVersion": "coordination.k8s.io/v1",
        "kind": "Lease",
        "metadata": {
            "name": name,
            "namespace": "kube-node-lease",
            "labels": {"vkpy.io/node-set": "s"},
        },
        "spec": {
            "holderIdentity": holder,
            "leaseDurationSeconds": DURATION,
            "acquireTime": ts(renewed),
            "renewTime": ts(renewed),
        },
    }
    if version:
        lease["metadata"]["resourceVersion"] = version
    return lease


def replica_lease(holder: str, renewed: float, version: str | None = None) -> dict[str, Any]:
    """A replica's own Lease (the live replicas are counted by these)."""
    lease = node_lease(holder, renewed, version, name=f"vkpy-set-s-{holder}")
    lease["metadata"]["labels"]["vkpy.io/node-set-replica"] = "true"
    return lease


async def renew(kube: FakeKube, lease: dict[str, Any]) -> None:
    """The holder renews `lease` (a PUT over the current version)."""
    path = f"{LEASES}/{lease['metadata']['name']}"
    lease["metadata"]["resourceVersion"] = kube.objects[path]["metadata"]["resourceVersion"]
    await kube.replace(path, lease)


def holder(kube: FakeKube, node: str) -> str:
    return str(kube.objects[f"{LEASES}/{node}"]["spec"].get("holderIdentity") or "")


@pytest.fixture
async def world(
    tmp_path: Path, request: pytest.FixtureRequest
) -> AsyncIterator[tuple[FakeKube, FakeClock, Sharded]]:
    """This replica ("a") of a set "s" of `nodes` nodes (a parametrized argument)."""
    clock = FakeClock()
    kube = FakeKube(clock)
    fleet = Sharded()
    NodeHost(
        settings(
            tmp_path,
            "--provider=sim",
            "--node-name=s",
            f"--nodes={getattr(request, 'param', 1)}",
            "--leader-elect",
            "--leader-elect-identity=a",
            f"--state-dir={tmp_path / 'state'}",
        ),
        kube,  # type: ignore[arg-type]
        fleet,
        clock,
    )
    yield kube, clock, fleet


@contextlib.asynccontextmanager
async def sharing(fleet: Sharded) -> AsyncIterator[None]:
    """The fleet's sharing loop runs for the block; then it stops, with its nodes."""
    task = asyncio.create_task(fleet.share())
    try:
        yield
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        await fleet.host.stop()
        await settle()


async def test_a_dead_peers_node_is_taken_when_its_lease_runs_out_not_a_round_later(
    world: tuple[FakeKube, FakeClock, Sharded],
) -> None:
    kube, clock, fleet = world
    await kube.create(LEASES, node_lease("b", clock.time()))
    async with sharing(fleet):
        await clock.advance(1)  # a's round at 0 s saw b holding the node
        # b renews just after a's round, then dies (SIGKILL: no release)
        current = kube.objects[NODE_LEASE]
        version = current["metadata"]["resourceVersion"]
        await kube.replace(NODE_LEASE, node_lease("b", clock.time(), version))
        renewed = clock.monotonic()
        await clock.advance(DURATION - 0.5)
        assert kube.objects[NODE_LEASE]["spec"]["holderIdentity"] == "b"  # still b's
        await clock.advance(1.0)  # its duration has passed since b's last renewal
        assert kube.objects[NODE_LEASE]["spec"]["holderIdentity"] == "a"
        acquired = kube.objects[NODE_LEASE]["spec"]["acquireTime"]
        taken = datetime.fromisoformat(acquired.replace("Z", "+00:00")).timestamp()
        renewed_wall = clock.time() - clock.monotonic() + renewed
        assert renewed_wall + DURATION <= taken <= renewed_wall + DURATION + 0.5


@pytest.mark.parametrize("world", [2], indirect=True)
async def test_a_dead_replica_is_counted_out_once_its_first_node_lease_runs_out(
    world: tuple[FakeKube, FakeClock, Sharded],
) -> None:
    """Two replicas, a node each; b renews its node's Lease at 1 s and its own Lease at
    5 s, then dies. At 41 s its node may be taken, but by the count of live replicas
    (b's own Lease is valid until 45 s) a holds its share already: b is counted out
    as its node's Lease runs out, and a takes the node then."""
    kube, clock, fleet = world
    await kube.create(LEASES, node_lease("b", clock.time(), name="s-1"))
    await kube.create(LEASES, replica_lease("b", clock.time()))
    async with sharing(fleet):
        await clock.advance(1)
        assert holder(kube, "s-0") == "a"  # its share of two replicas: one node
        assert fleet.held() == ["s-0"]
        await renew(kube, node_lease("b", clock.time(), name="s-1"))
        renewed = clock.monotonic()
        await clock.advance(4)
        await renew(kube, replica_lease("b", clock.time()))
        await clock.advance(renewed + DURATION - 0.5 - clock.monotonic())
        assert holder(kube, "s-1") == "b"
        assert fleet.replicas == 2
        await clock.advance(1.0)
        assert holder(kube, "s-1") == "a"
        assert sorted(fleet.held()) == ["s-0", "s-1"]
        assert fleet.replicas == 1


async def test_a_released_node_is_taken_at_once_not_at_the_next_round(
    world: tuple[FakeKube, FakeClock, Sharded],
) -> None:
    """A replica handing a node back (a replica joined, or it stops) releases its
    Lease; one under its share takes it as the release arrives."""
    kube, clock, fleet = world
    await kube.create(LEASES, node_lease("b", clock.time()))
    async with sharing(fleet):
        await clock.advance(3)
        assert holder(kube, "s-0") == "b"
        released = node_lease("b", clock.time())
        released["spec"].update(holderIdentity=None, leaseDurationSeconds=1)
        await renew(kube, released)
        await clock.advance(0.5)
        assert holder(kube, "s-0") == "a"


@pytest.mark.parametrize("world", [2], indirect=True)
async def test_a_replica_counted_out_counts_again_once_its_own_lease_changes(
    world: tuple[FakeKube, FakeClock, Sharded],
) -> None:
    """b lets its node's Lease run out but is alive (it renews its own Lease): a takes
    the node, then counts b again at b's next renewal and gives its share back."""
    kube, clock, fleet = world
    await kube.create(LEASES, node_lease("b", clock.time(), name="s-1"))
    await kube.create(LEASES, replica_lease("b", clock.time()))
    async with sharing(fleet):
        for _ in range(4):  # b renews its own Lease every 10 s, never its node's
            await clock.advance(10)
            await renew(kube, replica_lease("b", clock.time()))
        await clock.advance(1.5)  # 41.5 s: the node's Lease ran out at 40 s
        assert holder(kube, "s-1") == "a"
        assert fleet.replicas == 1
        await clock.advance(8.5)
        await renew(kube, replica_lease("b", clock.time()))  # alive after all
        await clock.advance(10.5)
        assert fleet.replicas == 2
        assert len(fleet.held()) == 1  # its share of two again


@pytest.mark.parametrize("world", [2], indirect=True)
async def test_the_rounds_read_the_leases_from_the_watch_not_a_list_each_time(
    world: tuple[FakeKube, FakeClock, Sharded],
) -> None:
    """At 1000 nodes a LIST of the set's Leases every retry period is a thousand
    objects a replica has from its watch already: once the watch has listed them,
    the rounds read what it saw, and still see a peer join."""
    kube, clock, fleet = world
    async with sharing(fleet):
        await clock.advance(1)
        lists_then = len(kube.requests_to("GET", r"/leases$"))
        assert sorted(fleet.held()) == ["s-0", "s-1"]  # alone: both nodes
        await kube.create(LEASES, replica_lease("b", clock.time()))
        for _ in range(5):  # five rounds; b renews its own Lease at each
            await clock.advance(2.5)
            await renew(kube, replica_lease("b", clock.time()))
        assert fleet.replicas == 2  # the rounds saw b join (through the watch)
        assert len(fleet.held()) == 1  # and gave b its share back
        assert len(kube.requests_to("GET", r"/leases$")) == lists_then  # no LIST since


@pytest.mark.parametrize("world", [2], indirect=True)
async def test_a_node_that_fails_here_is_released_for_another_replica_and_retried_later(
    world: tuple[FakeKube, FakeClock, Sharded],
) -> None:
    """Its Node refused (e.g. a label the API server rejects, a backend that will not
    start on this machine): the replica gives the node's Lease up instead of taking it
    again at each round, so a replica where it works gets it; after a Lease duration
    it may try again itself."""
    kube, clock, fleet = world
    kube.fail("POST", r"/api/v1/nodes$", ApiError(422, "Invalid", "bad label"), times=1)
    async with sharing(fleet):
        await clock.advance(1)
        assert len(fleet.held()) == 1  # one of the two failed
        failed = next(n for n in ("s-0", "s-1") if n not in fleet.held())
        assert holder(kube, failed) == ""  # released, takeable by any other replica
        posts = len(kube.requests_to("POST", r"/api/v1/nodes$"))
        await clock.advance(DURATION - 5)  # rounds pass: not taken again here
        assert holder(kube, failed) == ""
        assert len(kube.requests_to("POST", r"/api/v1/nodes$")) == posts
        await clock.advance(10)  # a Lease duration after: tried again, and it works now
        assert holder(kube, failed) == "a"
        assert sorted(fleet.held()) == ["s-0", "s-1"]


async def test_a_node_served_here_has_its_lease_renewed_by_its_elector_alone(
    world: tuple[FakeKube, FakeClock, Sharded],
) -> None:
    """The Lease a replica holds a node by is the node's heartbeat: the node gets no
    LeaseKeeper of its own (issue 28: one was built for every node and never run),
    and the Lease is renewed by the elector's writes, held by the replica."""
    kube, clock, fleet = world
    async with sharing(fleet):
        await clock.advance(1)
        served = fleet.slots["s-0"].serving
        assert served is not None
        assert served.lease is None
        renewals = len(kube.requests_to("PUT", f"{NODE_LEASE}$"))
        await clock.advance(3 * DURATION)
        assert holder(kube, "s-0") == "a"
        assert len(kube.requests_to("PUT", f"{NODE_LEASE}$")) > renewals
        assert not kube.requests_to("PATCH", f"{NODE_LEASE}$")  # no keeper's merge patch
