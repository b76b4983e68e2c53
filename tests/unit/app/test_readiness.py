"""What a replica's /readyz says (vkpy.app.runner.Probes). A leading replica whose serving
certificate is not issued yet is not ready: the node cannot serve `kubectl logs`/`exec`,
so `helm install --wait` must not report success (issue 27); /readyz names the command
that unblocks it. Nor is a replica ready before its first try for the Lease, or once it
holds it but does not run the node yet; a standby is."""

from __future__ import annotations

import asyncio
import contextlib
import random
from dataclasses import dataclass, field
from pathlib import Path
from types import SimpleNamespace
from typing import Any, cast

from tests.unit.api.certs.test_api_csr import Clock, Events, Signer, eventually
from tests.unit.app.test_cli import settings
from tests.unit.fake_clock import FakeClock
from tests.unit.fake_kube import FakeKube
from vkpy.api.certs.csr import CertificateRotator
from vkpy.api.certs.tls import ServingTLS
from vkpy.app.runner import Probes
from vkpy.fleet.leader import LeaderElector
from vkpy.fleet.settings import ElectionSettings


@dataclass
class Host:
    """What the probes read of a node host (vkpy.app.runner.Probed), set by hand."""

    nodes: list[Any] = field(default_factory=list)
    rotator: CertificateRotator | None = None
    elector: LeaderElector | None = None
    sharing: bool = False

    def controllers(self) -> list[Any]:
        return self.nodes

    def certificate(self) -> CertificateRotator | None:
        return self.rotator


async def test_the_leader_is_ready_once_its_serving_certificate_is_issued(
    tmp_path: Path,
) -> None:
    class StillClock(Clock):
        async def sleep(self, seconds: float) -> None:
            await asyncio.sleep(0.001)  # time stands still: the CSR never times out here

    clock = StillClock()
    signer = Signer(clock, ["ignore"])  # nobody approves the CSR (yet)
    rotator = CertificateRotator(
        cast(Any, signer),
        ServingTLS(verify_client=False),
        cast(Any, Events()),
        "node-1",
        ["192.0.2.7", "node-1"],
        tmp_path,
        clock=clock,
        rng=random.Random(7),
    )
    host = Host()
    probes = Probes(settings(tmp_path, "--rotate-server-certificates"), host)
    registered = asyncio.Event()
    host.nodes = [SimpleNamespace(registered=registered, api_error=None)]
    host.rotator = rotator
    registered.set()
    assert probes.api() == "serving certificate not issued yet"
    task = asyncio.create_task(rotator.run())
    try:
        await eventually(lambda: rotator.pending is not None)
        assert (
            probes.api() == "serving certificate not issued yet: kubectl certificate approve csr-0"
        )
        signer.decisions[0] = "approve"  # kubectl certificate approve csr-0
        await eventually(lambda: probes.api() is None)
        assert rotator.issued.is_set()
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task


def test_without_a_csr_the_certificate_never_holds_readiness_back(tmp_path: Path) -> None:
    registered = asyncio.Event()
    registered.set()
    node = SimpleNamespace(registered=registered, api_error=None)
    probes = Probes(settings(tmp_path), Host([node]))
    assert probes.api() is None  # files or self-signed: served from the start


async def test_a_replica_is_ready_as_a_standby_not_before_its_first_try(tmp_path: Path) -> None:
    clock = FakeClock()
    kube = FakeKube(clock)
    config = settings(tmp_path, "--leader-elect", "--leader-elect-resource-namespace=vk")

    def replica(identity: str) -> tuple[LeaderElector, Probes]:
        election = ElectionSettings("vk", "vkpy-vk-1", identity, 15, 10, 2)
        elector = LeaderElector(cast(Any, kube), election, clock)
        return elector, Probes(config, Host(elector=elector))

    leader, leader_probes = replica("a")
    standby, standby_probes = replica("b")
    assert leader_probes.api() == standby_probes.api() == "starting"
    assert await leader.try_acquire_or_renew()
    assert leader_probes.api() == "starting"  # leading: ready once its node runs
    assert not await standby.try_acquire_or_renew()
    assert standby_probes.api() is None
