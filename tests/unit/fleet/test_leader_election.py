"""Leader election on a Lease: one leader at a time, a standby takes over only after the
lease duration (or at once after a release), and a leader that cannot renew stops
writing (its budget is spent) before any standby may start."""

from __future__ import annotations

import asyncio
import ssl
from collections.abc import AsyncIterator
from dataclasses import replace

import pytest

from tests.unit.fake_clock import FakeClock, settle
from tests.unit.fake_kube import FakeKube
from vkpy.fleet.leader import LeaderElector, LeadershipLost, apart_from_node_leases
from vkpy.fleet.settings import ElectionSettings
from vkpy.kube.access import Access
from vkpy.kube.client import ApiError, ClientOptions, KubeClient, NotLeaderError

LEASE = "/apis/coordination.k8s.io/v1/namespaces/vk-system/leases/vkpy-vk-1"


class Replica:
    """One replica: an elector and a `lead` that records when it ran."""

    def __init__(self, kube: FakeKube, clock: FakeClock, identity: str) -> None:
        self.clock = clock
        self.elector = LeaderElector(
            kube,  # type: ignore[arg-type]
            ElectionSettings("vk-system", "vkpy-vk-1", identity, 15, 10, 2),
            clock,
        )
        self.led_at: float | None = None
        self.stopped_at: float | None = None
        self.task: asyncio.Task[None] | None = None

    async def _lead(self) -> None:
        self.led_at = self.clock.monotonic()
        try:
            await asyncio.Event().wait()
        finally:
            self.stopped_at = self.clock.monotonic()

    def start(self) -> None:
        self.task = asyncio.create_task(self.elector.run(self._lead))

    async def crash(self) -> None:
        """Gone without a word (SIGKILL): no release, no more renewals."""
        assert self.task is not None
        self.task.cancel()
        await asyncio.gather(self.task, return_exceptions=True)


@pytest.fixture
async def world() -> AsyncIterator[tuple[FakeKube, FakeClock, list[Replica]]]:
    clock = FakeClock()
    kube = FakeKube(clock)
    replicas = [Replica(kube, clock, f"r{n}") for n in range(3)]
    yield kube, clock, replicas
    for replica in replicas:
        if replica.task is not None:
            replica.task.cancel()
            await asyncio.gather(replica.task, return_exceptions=True)


async def test_one_leader_and_standbys_wait(
    world: tuple[FakeKube, FakeClock, list[Replica]],
) -> None:
    kube, clock, replicas = world
    for replica in replicas:
        replica.start()
        await settle()
    await clock.advance(60)
    leading = [r for r in replicas if r.led_at is not None]
    assert [r.elector.identity for r in leading] == ["r0"]
    assert kube.objects[LEASE]["spec"]["holderIdentity"] == "r0"
    assert replicas[0].elector.is_leader()
    assert not replicas[1].elector.is_leader()


async def test_standby_takes_over_after_the_lease_duration_once_the_leader_is_gone(
    world: tuple[FakeKube, FakeClock, list[Replica]],
) -> None:
    kube, clock, (leader, standby, _) = world
    leader.start()
    await settle()
    standby.start()
    await clock.advance(5)
    last_renewal = kube.objects[LEASE]["spec"]["renewTime"]
    crashed_at = clock.monotonic()
    await leader.crash()
    fence_ends = crashed_at + leader.elector.write_budget()
    await clock.advance(30)
    assert standby.led_at is not None
    assert kube.objects[LEASE]["spec"]["holderIdentity"] == "r1"
    assert kube.objects[LEASE]["spec"]["leaseTransitions"] == 1
    assert kube.objects[LEASE]["spec"]["renewTime"] != last_renewal
    # the old leader's right to write ended before the standby started, by a margin
    assert fence_ends <= standby.led_at - 4
    assert standby.led_at - crashed_at <= 15 + 2 + 0.01
    assert not leader.elector.is_leader()


async def test_release_hands_over_at_the_next_try(
    world: tuple[FakeKube, FakeClock, list[Replica]],
) -> None:
    kube, clock, (leader, standby, _) = world
    leader.start()
    await settle()
    standby.start()
    await clock.advance(5)
    await leader.crash()
    released_at = clock.monotonic()
    await leader.elector.release()
    assert kube.objects[LEASE]["spec"].get("holderIdentity") is None
    await clock.advance(3)
    assert standby.led_at is not None and standby.led_at - released_at <= 2
    assert kube.objects[LEASE]["spec"]["holderIdentity"] == "r1"


async def test_a_leader_that_cannot_renew_stops_at_the_renew_deadline(
    world: tuple[FakeKube, FakeClock, list[Replica]],
) -> None:
    kube, clock, (leader, standby, _) = world
    leader.start()
    await settle()
    standby.start()
    await clock.advance(4)
    kube.fail("PUT", "/leases/", ApiError(0, "Unreachable", "partitioned"), times=1000)
    kube.fail("GET", "/leases/vkpy-vk-1$", ApiError(0, "Unreachable", "partitioned"), times=1000)
    await clock.advance(11)
    assert leader.task is not None and leader.task.done()
    assert isinstance(leader.task.exception(), LeadershipLost)
    assert leader.stopped_at is not None
    assert not leader.elector.is_leader()
    assert standby.led_at is None  # the API was unreachable for everyone
    kube.faults.clear()
    await clock.advance(20)
    assert standby.led_at is not None and leader.stopped_at <= standby.led_at - 5


async def test_a_leader_that_sees_another_holder_steps_down_at_once(
    world: tuple[FakeKube, FakeClock, list[Replica]],
) -> None:
    kube, clock, (leader, *_) = world
    leader.start()
    await clock.advance(3)
    lease = kube.objects[LEASE]
    await kube.replace(LEASE, {**lease, "spec": {**lease["spec"], "holderIdentity": "intruder"}})
    await clock.advance(2.5)
    assert leader.task is not None and leader.task.done()
    assert isinstance(leader.task.exception(), LeadershipLost)
    assert "intruder" in str(leader.task.exception())


def test_settings_refuse_a_renew_deadline_past_the_lease_duration() -> None:
    with pytest.raises(ValueError, match="renew deadline"):
        ElectionSettings("ns", "n", "me", lease_duration=10, renew_deadline=10, retry_period=2)


async def test_fenced_client_refuses_writes_once_the_budget_is_spent() -> None:
    access = Access("https://127.0.0.1:9", ssl.create_default_context())
    base = KubeClient.open(access, ClientOptions(request_timeout=2))
    budget = [0.0]
    fenced = base.fenced(lambda: budget[0])
    try:
        with pytest.raises(NotLeaderError):
            await fenced.patch("/api/v1/nodes/vk-1/status", {"status": {}})
        with pytest.raises(NotLeaderError):
            await fenced.create("/api/v1/namespaces/default/events", {})
        # reads are never fenced (this one fails only because nothing listens there)
        with pytest.raises(ApiError) as read:
            await fenced.get("/api/v1/nodes/vk-1")
        assert not isinstance(read.value, NotLeaderError)
        budget[0] = 5.0
        with pytest.raises(ApiError) as write:
            await fenced.patch("/api/v1/nodes/vk-1/status", {"status": {}})
        assert not isinstance(write.value, NotLeaderError)
    finally:
        await fenced.close()
        await base.close()


async def test_the_holder_renews_with_one_put_and_reads_only_after_a_conflict(
    world: tuple[FakeKube, FakeClock, list[Replica]],
) -> None:
    kube, clock, (leader, _, _) = world
    leader.start()
    await settle()
    reads = len(kube.requests_to("GET", LEASE + "$"))
    await clock.advance(20)  # ten renewals
    assert len(kube.requests_to("PUT", LEASE + "$")) >= 10
    assert len(kube.requests_to("GET", LEASE + "$")) == reads
    kube.objects[LEASE]["metadata"]["labels"] = {"added": "by-someone"}  # a write in between
    kube.objects[LEASE]["metadata"]["resourceVersion"] = "9999"
    await clock.advance(2)
    assert len(kube.requests_to("GET", LEASE + "$")) == reads + 1
    assert leader.elector.is_leader()
    assert kube.objects[LEASE]["metadata"]["labels"] == {"added": "by-someone"}


async def test_a_nodes_lease_keeps_its_labels_and_owner_and_can_be_observed_from_a_list() -> None:
    clock = FakeClock()
    kube = FakeKube(clock)
    settings = ElectionSettings(
        "kube-node-lease", "vk-1", "replica-a", 8, 5, 1, labels={"vkpy.io/node-set": "s"}
    )
    owner = {"apiVersion": "v1", "kind": "Node", "name": "vk-1", "uid": "u-1"}
    path = "/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases/vk-1"
    a = LeaderElector(kube, settings, clock, owner=lambda: owner)  # type: ignore[arg-type]
    b = LeaderElector(kube, replace(settings, identity="replica-b"), clock)  # type: ignore[arg-type]
    assert b.vacant()  # never seen: worth a try
    assert await a.try_acquire_or_renew()
    lease = kube.objects[path]
    assert lease["metadata"]["labels"] == {"vkpy.io/node-set": "s"}
    assert lease["metadata"]["ownerReferences"] == [owner]
    b.observe(lease)
    assert b.holder() == "replica-a" and not b.vacant()
    assert not await b.try_acquire_or_renew(lease)  # held and fresh: not taken
    await clock.advance(7.9)
    b.observe(kube.objects[path])  # unchanged for less than its duration
    assert not b.vacant()
    await clock.advance(0.2)
    assert b.vacant()
    assert await b.try_acquire_or_renew(kube.objects[path])
    taken = kube.objects[path]
    assert taken["spec"]["holderIdentity"] == "replica-b"
    assert taken["metadata"]["ownerReferences"] == [owner]  # kept from before
    assert taken["metadata"]["labels"] == {"vkpy.io/node-set": "s"}


def test_a_leader_lease_among_the_node_leases_is_refused() -> None:
    """Issue 27: kube-node-lease holds the nodes' heartbeat Leases, which the leader
    renews as its node; a leader Lease there could be one of them."""
    for name in ("vk-1", "vkpy-vk-1"):
        with pytest.raises(ValueError, match=f"kube-node-lease/{name} must not be in"):
            apart_from_node_leases(ElectionSettings("kube-node-lease", name, "r0"))
    apart_from_node_leases(ElectionSettings("vk-system", "vk-1", "r0"))  # its own object
