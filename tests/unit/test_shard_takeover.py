"""A shared node set's takeover timing (issue 17: a dead replica's nodes taken within
the lease duration plus one renewal): a replica times a peer's node Lease from the
moment the Lease last changed, as its watch on the set's Leases delivers the change,
not from the round in which it next lists them (up to a retry period later), and it
takes the node as soon as that duration has passed."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest

from tests.unit.fake_clock import FakeClock, settle
from tests.unit.fake_kube import FakeKube, ts
from tests.unit.test_cli import settings
from vkpy.shard import ShardedFleet

LEASES = "/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases"
NODE_LEASE = f"{LEASES}/s-0"
DURATION = 40  # the defaults of a shared set: Lease 40 s, rounds every 10 s


def node_lease(holder: str, renewed: float, version: str | None = None) -> dict[str, Any]:
    lease: dict[str, Any] = {
        "apiVersion": "coordination.k8s.io/v1",
        "kind": "Lease",
        "metadata": {
            "name": "s-0",
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


@pytest.fixture
async def world(tmp_path: Path) -> AsyncIterator[tuple[FakeKube, FakeClock, ShardedFleet]]:
    clock = FakeClock()
    kube = FakeKube(clock)
    fleet = ShardedFleet(
        settings(
            tmp_path,
            "--provider=sim",
            "--node-name=s",
            "--nodes=1",
            "--leader-elect",
            "--leader-elect-identity=a",
            f"--state-dir={tmp_path / 'state'}",
        ),
        kube,  # type: ignore[arg-type]
        clock,
    )
    yield kube, clock, fleet


async def test_a_dead_peers_node_is_taken_when_its_lease_runs_out_not_a_round_later(
    world: tuple[FakeKube, FakeClock, ShardedFleet],
) -> None:
    kube, clock, fleet = world
    await kube.create(LEASES, node_lease("b", clock.time()))
    sharing = asyncio.create_task(fleet.share())
    try:
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
    finally:
        sharing.cancel()
        await asyncio.gather(sharing, return_exceptions=True)
        await fleet.stop()
        await settle()
