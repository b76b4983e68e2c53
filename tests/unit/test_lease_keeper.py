"""The node Lease: created when missing, renewed every interval, owned by the Node,
re-read after a conflict, and kept renewing through API errors of every kind."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest

from tests.unit.fake_clock import FakeClock, settle
from tests.unit.fake_kube import FakeKube
from vkpy.kube.client import ApiError
from vkpy.node.lease import LeaseKeeper

LEASE = "/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases/vk-1"


class Lease:
    def __init__(self) -> None:
        self.clock = FakeClock()
        self.kube = FakeKube(self.clock)
        self.keeper = LeaseKeeper(
            self.kube,  # type: ignore[arg-type]
            "vk-1",
            lambda: "node-uid",
            duration=40,
            renew_interval=10,
            sleep=self.clock.sleep,
            monotonic=self.clock.monotonic,
        )
        self.task: asyncio.Task[None] | None = None

    def start(self) -> None:
        self.task = asyncio.create_task(self.keeper.run())

    def writes(self) -> int:
        return len(self.kube.requests_to("PUT", LEASE + "$")) + len(
            self.kube.requests_to("POST", "/leases$")
        )


@pytest.fixture
async def lease() -> AsyncIterator[Lease]:
    keeper = Lease()
    yield keeper
    if keeper.task is not None:
        keeper.task.cancel()
        await asyncio.gather(keeper.task, return_exceptions=True)


async def test_creates_the_lease_owned_by_the_node_and_renews_it(lease: Lease) -> None:
    lease.start()
    await settle()
    created = lease.kube.objects[LEASE]
    assert created["spec"]["holderIdentity"] == "vk-1"
    assert created["spec"]["leaseDurationSeconds"] == 40
    owner = created["metadata"]["ownerReferences"][0]
    assert (owner["kind"], owner["uid"]) == ("Node", "node-uid")
    await lease.clock.advance(30)
    assert lease.keeper.renewals == 4
    assert lease.writes() == 4


async def test_conflict_reads_the_lease_again(lease: Lease) -> None:
    lease.start()
    await settle()
    lease.kube.objects[LEASE]["metadata"]["resourceVersion"] = "999"  # someone else wrote
    await lease.clock.advance(10)
    assert lease.keeper.renewals == 2
    assert lease.kube.requests_to("GET", LEASE + "$")


@pytest.mark.parametrize(
    "error",
    [
        ApiError(500, "InternalError", "etcd"),
        ApiError(0, "Unreachable", "connection refused"),
        ApiError(403, "Forbidden", "no"),
        ApiError(429, "TooManyRequests", "slow down"),
    ],
)
async def test_api_errors_are_survived(lease: Lease, error: ApiError) -> None:
    lease.start()
    await settle()
    lease.kube.fail("PUT", LEASE + "$", error)
    await lease.clock.advance(10)
    assert lease.keeper.renewals == 1
    await lease.clock.advance(10)
    assert lease.keeper.renewals == 2
    assert lease.task is not None and not lease.task.done()


async def test_lease_deleted_by_someone_is_created_again(lease: Lease) -> None:
    lease.start()
    await settle()
    del lease.kube.objects[LEASE]
    await lease.clock.advance(10)
    assert LEASE in lease.kube.objects
    assert lease.keeper.renewals == 2


async def test_many_spread_leases_are_renewed_evenly_and_never_late() -> None:
    """A node set's Leases (spread=True): after the first renewal each keeps its own
    point in the 10 s period, so renewals are spread over the period, and no Lease
    ever waits longer than the period between two renewals."""
    clock = FakeClock()
    kube = FakeKube(clock)
    keepers = [
        LeaseKeeper(
            kube,  # type: ignore[arg-type]
            f"vk-{n}",
            lambda: "uid",
            renew_interval=10,
            sleep=clock.sleep,
            monotonic=clock.monotonic,
            spread=True,
        )
        for n in range(40)
    ]
    tasks = [asyncio.create_task(k.run()) for k in keepers]
    try:
        await settle()
        seen = [k.renewals for k in keepers]
        last = [0.0] * len(keepers)
        longest_gap = 0.0
        per_second: list[int] = []
        for second in range(1, 61):
            await clock.advance(1)
            now = [k.renewals for k in keepers]
            per_second.append(sum(now) - sum(seen))
            for n, (before, after) in enumerate(zip(seen, now, strict=True)):
                if after > before:
                    longest_gap = max(longest_gap, second - last[n])
                    last[n] = second
            seen = now
        assert longest_gap <= 10
        assert min(seen) >= 6  # the first, then at least one every 10 s
        steady = per_second[10:]  # after the first period: 40 Leases / 10 s = 4 a second
        assert sum(steady) == 40 * 5
        assert max(steady) < 40, "the renewals are not all in the same instant"
    finally:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)


async def test_a_slow_api_server_gets_no_burst_of_catch_up_renewals() -> None:
    """Renewals answered after 25 s (an overloaded API server): the next one waits for
    its point of the 10 s schedule, so the keeper never sends more than one renewal
    per period and never a burst to catch up."""
    clock = FakeClock()

    class SlowKube(FakeKube):
        async def replace(self, path: str, body: dict[str, object]) -> dict[str, object]:
            await clock.sleep(25)
            return await super().replace(path, body)

    kube = SlowKube(clock)
    keeper = LeaseKeeper(
        kube,  # type: ignore[arg-type]
        "vk-1",
        lambda: "uid",
        renew_interval=10,
        sleep=clock.sleep,
        monotonic=clock.monotonic,
    )
    task = asyncio.create_task(keeper.run())
    try:
        await settle()
        for _ in range(120):
            await clock.advance(1)
        puts = len(kube.requests_to("PUT", LEASE + "$"))
        assert 3 <= puts <= 120 / 25 + 1
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
