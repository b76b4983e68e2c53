"""The health probes behind --health-port read what the host serves now (issue 28): a
replica of a shared set serving no node is ready, a set not running yet is
"starting", and the probes follow the nodes a shared replica takes and gives back,
asking the host each time rather than a list the set mutates in place."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

from tests.unit.app.test_cli import settings
from tests.unit.fake_clock import FakeClock
from tests.unit.fake_kube import FakeKube
from tests.unit.fleet.test_host import eventually, free_ports, running
from vkpy.app.runner import Probes, membership
from vkpy.fleet.host import NodeHost
from vkpy.fleet.membership import Elected, Static
from vkpy.fleet.sharded import Sharded
from vkpy.kube.client import ApiError


async def test_a_replica_sharing_a_set_is_ready_while_it_serves_no_node(tmp_path: Path) -> None:
    """With --health-port, a replica of a shared set that serves no node (all taken
    by the others, or none taken yet) is ready, not "starting" forever."""
    kube = FakeKube(FakeClock())
    unshared = settings(tmp_path, "--provider=sim", "--nodes=3", f"--state-dir={tmp_path / 'a'}")
    static = NodeHost(unshared, kube, Static())  # type: ignore[arg-type]
    assert Probes(unshared, static).api() == "starting"  # what an unshared start says until it runs
    shared = settings(
        tmp_path, "--provider=sim", "--nodes=3", "--leader-elect", f"--state-dir={tmp_path / 'b'}"
    )
    probes = Probes(shared, NodeHost(shared, kube, Sharded()))  # type: ignore[arg-type]
    assert probes.api() is None
    assert probes.loops() is None


async def test_the_probes_follow_the_nodes_a_shared_replica_serves(tmp_path: Path) -> None:
    clock = FakeClock()
    kube = FakeKube(clock)
    s = settings(
        tmp_path,
        "--provider=sim",
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


class CsrKube(FakeKube):
    """The fake API server, naming CSRs made with generateName as the server would."""

    async def create(
        self, path: str, body: dict[str, Any], decode: bool = True, background: bool = False
    ) -> dict[str, Any]:
        meta = body.get("metadata") or {}
        if "name" not in meta and "generateName" in meta:
            body = {**body, "metadata": {**meta, "name": f"{meta['generateName']}1"}}
        return await super().create(path, body, decode, background)


async def readiness_with_a_csr_waiting(tmp_path: Path, *extra: str) -> str | None:
    """/readyz's answer once the host's nodes are registered, its serving certificate
    asked for (--rotate-server-certificates) and not approved."""
    kube = CsrKube(FakeClock())
    s = settings(
        tmp_path,
        "--provider=sim",
        "--node-name=solo",
        f"--state-dir={tmp_path / 'state'}",
        f"--port={free_ports(2)}",
        "--listen-address=127.0.0.1",
        "--node-ip=127.0.0.1",
        "--rotate-server-certificates",
        *extra,
    )
    host = NodeHost(s, kube, Static())  # type: ignore[arg-type]
    probes = Probes(s, host)
    async with running(host):
        nodes = host.controllers
        count = len(s.node_set) or 1
        await eventually(
            "the nodes registered",
            lambda: len(nodes()) == count and all(c.registered.is_set() for c in nodes()),
        )
        await eventually("a CSR", lambda: kube.objects.get(f"{CSRS}/csr-1"))
        await eventually("the CSR pending", lambda: "approve" in (probes.api() or "") or extra)
        return probes.api()


CSRS = "/apis/certificates.k8s.io/v1/certificatesigningrequests"


async def test_one_node_is_ready_once_its_serving_certificate_is_issued(tmp_path: Path) -> None:
    """--rotate-server-certificates: the one node's host is not ready while its CSR
    waits for approval (issue 27), and says which CSR to approve."""
    answer = await readiness_with_a_csr_waiting(tmp_path)
    assert answer == "serving certificate not issued yet: kubectl certificate approve csr-1"


async def test_a_sets_certificate_does_not_hold_its_readiness_back(tmp_path: Path) -> None:
    """A set's one certificate names its first node only, which a shared set's other
    replicas may hold: the set is ready once its nodes are registered, as before."""
    assert await readiness_with_a_csr_waiting(tmp_path, "--nodes=2") is None
