"""The health probes behind --health-port read what the host serves now (issue 28): a
replica of a shared set serving no node is ready, a set not running yet is
"starting", and the probes follow the nodes a shared replica takes and gives back,
asking the host each time rather than a list the set mutates in place."""

from __future__ import annotations

import asyncio
from pathlib import Path

from tests.unit.app.test_cli import settings
from tests.unit.fake_clock import FakeClock
from tests.unit.fake_kube import FakeKube
from vkpy.app.runner import Probes, membership
from vkpy.fleet.host import NodeHost
from vkpy.fleet.membership import Elected, Static
from vkpy.fleet.sharded import Sharded
from vkpy.kube.client import ApiError


async def test_a_replica_sharing_a_set_is_ready_while_it_serves_no_node(tmp_path: Path) -> None:
    """With --health-port, a replica of a shared set that serves no node (all taken
    by the others, or none taken yet) is ready, not "starting" forever."""
    kube = FakeKube(FakeClock())
    unshared = settings(tmp_path, "--nodes=3", f"--state-dir={tmp_path / 'a'}")
    static = NodeHost(unshared, kube, Static())  # type: ignore[arg-type]
    assert Probes(unshared, static).api() == "starting"  # what an unshared start says until it runs
    shared = settings(tmp_path, "--nodes=3", "--leader-elect", f"--state-dir={tmp_path / 'b'}")
    probes = Probes(shared, NodeHost(shared, kube, Sharded()))  # type: ignore[arg-type]
    assert probes.api() is None
    assert probes.loops() is None


async def test_the_probes_follow_the_nodes_a_shared_replica_serves(tmp_path: Path) -> None:
    clock = FakeClock()
    kube = FakeKube(clock)
    s = settings(
        tmp_path,
        "--node-name=s",
        "--nodes=1",
        "--leader-elect",
        "--leader-elect-identity=a",
        f"--state-dir={tmp_path / 'state'}",
    )
    sharded = Sharded()
    host = NodeHost(s, kube, sharded, clock)  # type: ignore[arg-type]
    probes = Probes(s, host)
    share = asyncio.create_task(sharded.share())
    try:
        await clock.advance(1)
        assert sharded.held() == ["s-0"]
        assert [c.registered.is_set() for c in host.controllers()] == [True]
        assert probes.api() is None
        outage = ApiError(503, "ServiceUnavailable", "etcd is down")
        kube.fail("PATCH", r"/api/v1/nodes/s-0/status$", outage, times=1000)
        await clock.advance(320)  # the set's status interval (300 s): a write is due
        assert "etcd is down" in (probes.api() or "")  # the node served here cannot report
    finally:
        share.cancel()
        await asyncio.gather(share, return_exceptions=True)
        await host.stop()
    assert sharded.held() == []
    assert host.controllers() == []
    assert probes.api() is None  # given back: nothing of it is left to report on


def test_the_settings_choose_the_membership(tmp_path: Path) -> None:
    kube = FakeKube(FakeClock())
    one = settings(tmp_path, "--node-name=n")
    assert type(membership(one, kube)) is Static  # type: ignore[arg-type]
    standby = settings(tmp_path, "--node-name=n", "--leader-elect")
    assert type(membership(standby, kube)) is Elected  # type: ignore[arg-type]
    shared = settings(tmp_path, "--node-name=n", "--nodes=2", "--leader-elect")
    assert type(membership(shared, kube)) is Sharded  # type: ignore[arg-type]
    many = settings(tmp_path, "--node-name=n", "--nodes=2")
    assert type(membership(many, kube)) is Static  # type: ignore[arg-type]
