"""Per-key serialization, coalescing, retry, and timers by reason of the pod work queue."""

from __future__ import annotations

import asyncio
import itertools
import tracemalloc
from collections.abc import AsyncIterator

import pytest

from tests.unit.fake_clock import FakeClock, settle
from vkpy.node.pods.keyed_queue import BACKOFF, KeyedQueue, Retry


@pytest.fixture
async def clock() -> FakeClock:
    return FakeClock()


class Running:
    """Runs a queue for the test; stopped (and awaited) at the end."""

    def __init__(self, queue: KeyedQueue) -> None:
        self.task = asyncio.create_task(queue.run())

    async def stop(self) -> None:
        self.task.cancel()
        await asyncio.gather(self.task, return_exceptions=True)


@pytest.fixture
async def running() -> AsyncIterator[list[Running]]:
    started: list[Running] = []
    yield started
    for run in started:
        await run.stop()


async def test_one_key_never_runs_twice_at_once_and_changes_coalesce(
    running: list[Running],
) -> None:
    active: set[str] = set()
    overlaps = 0
    calls: list[str] = []
    release = asyncio.Event()

    async def handler(key: str) -> None:
        nonlocal overlaps
        if key in active:
            overlaps += 1
        active.add(key)
        calls.append(key)
        await release.wait()
        active.discard(key)

    queue = KeyedQueue(handler, workers=4)
    running.append(Running(queue))
    for _ in range(10):
        queue.add("a")
    queue.add("b")
    await settle()
    assert calls == ["a", "b"]
    assert queue.running("a") and queue.running("b") and not queue.running("c")
    for _ in range(10):
        queue.add("a")  # while "a" runs: exactly one more run, after this one
    await settle()
    assert calls == ["a", "b"]
    release.set()
    await settle()
    assert overlaps == 0
    assert calls.count("a") == 2
    assert calls.count("b") == 1
    assert not queue.busy()
    assert not queue.running("a")


async def test_failures_are_retried_with_growing_backoff(
    clock: FakeClock, running: list[Running]
) -> None:
    attempts: list[float] = []

    async def handler(key: str) -> None:
        attempts.append(clock.monotonic())
        if len(attempts) < 4:
            raise Retry("not yet")

    queue = KeyedQueue(handler, workers=1, base_backoff=1.0, clock=clock)
    running.append(Running(queue))
    queue.add("k")
    await clock.advance(20)
    gaps = [b - a for a, b in itertools.pairwise(attempts)]
    assert len(attempts) == 4
    assert [round(g) for g in gaps] == [1, 2, 4]  # within the 10% jitter
    assert queue.due_in("k", BACKOFF) is None  # success reset it
    assert not queue.busy()


async def test_retry_max_delay_caps_the_backoff(clock: FakeClock, running: list[Running]) -> None:
    attempts: list[float] = []

    async def handler(key: str) -> None:
        attempts.append(clock.monotonic())
        raise Retry("waiting for a ConfigMap", max_delay=5.0, quiet=True)

    queue = KeyedQueue(handler, workers=1, base_backoff=1.0, clock=clock)
    running.append(Running(queue))
    queue.add("k")
    await clock.advance(60)
    gaps = [b - a for a, b in itertools.pairwise(attempts)]
    assert max(gaps) <= 5.5
    assert gaps[-1] >= 4.5


async def test_retry_after_is_a_floor_that_no_cap_lowers(
    clock: FakeClock, running: list[Running]
) -> None:
    """A backend's hint (Retry-After) says when to come back: never sooner, whatever
    the back-off or its cap would say; the back-off still grows underneath."""
    attempts: list[float] = []

    async def handler(key: str) -> None:
        attempts.append(clock.monotonic())
        if len(attempts) == 1:
            raise Retry("throttled", max_delay=2.0, after=30.0)
        if len(attempts) == 2:
            raise Retry("throttled again")

    queue = KeyedQueue(handler, workers=1, base_backoff=1.0, clock=clock)
    running.append(Running(queue))
    queue.add("k")
    await clock.advance(100)
    gaps = [b - a for a, b in itertools.pairwise(attempts)]
    assert len(attempts) == 3
    assert gaps[0] == pytest.approx(30.0)
    assert 1.8 <= gaps[1] <= 2.2  # the second failure's back-off: 2 s, within jitter


async def test_timers_by_reason_do_not_replace_each_other(
    clock: FakeClock, running: list[Running]
) -> None:
    calls: list[float] = []

    async def handler(key: str) -> None:
        calls.append(clock.monotonic())

    queue = KeyedQueue(handler, workers=1, clock=clock)
    running.append(Running(queue))
    start = clock.monotonic()
    queue.add_after("k", 30, "deadline")
    queue.add_after("k", 10, "token")
    queue.add_after("k", 20, "token")  # the same reason: replaced (later is fine)
    queue.retry_later("k")
    queue.forget("k")  # resets back-off only
    assert queue.due_in("k", BACKOFF) is None
    assert queue.due_in("k", "deadline") == pytest.approx(30)
    await clock.advance(40)
    assert [round(c - start) for c in calls] == [20, 30]


async def test_drop_cancels_every_timer(clock: FakeClock, running: list[Running]) -> None:
    calls: list[str] = []

    async def handler(key: str) -> None:
        calls.append(key)

    queue = KeyedQueue(handler, workers=1, clock=clock)
    running.append(Running(queue))
    queue.add_after("k", 5, "deadline")
    queue.add_after("k", 6, "token")
    queue.add_after("other", 7, "token")
    queue.drop("k")
    await clock.advance(10)
    assert calls == ["other"]


async def test_unexpected_errors_are_retried_too(clock: FakeClock, running: list[Running]) -> None:
    calls = 0

    async def handler(key: str) -> None:
        nonlocal calls
        calls += 1
        if calls == 1:
            raise RuntimeError("bug")

    queue = KeyedQueue(handler, workers=1, base_backoff=1.0, clock=clock)
    running.append(Running(queue))
    queue.add("k")
    await clock.advance(2)
    assert calls == 2


def workers_alive() -> int:
    return sum(1 for t in asyncio.all_tasks() if t.get_name().startswith("pod-worker"))


async def test_an_idle_queue_keeps_no_worker_task(running: list[Running]) -> None:
    """Issue 30: 1000 nodes each kept their pod workers waiting on an empty queue
    (a task, a coroutine and a waiter each, and an asyncio.Queue of four deques per
    node); an idle node now holds none, and `vkpy_asyncio_tasks` shows it."""

    async def handler(key: str) -> None:
        await asyncio.sleep(0)

    queue = KeyedQueue(handler, workers=50)
    running.append(Running(queue))
    await settle()
    assert workers_alive() == 0
    for n in range(10):
        queue.add(f"k{n}")
    await settle()
    assert not queue.busy()
    assert workers_alive() == 0


async def test_a_burst_runs_exactly_workers_at_once(running: list[Running]) -> None:
    inside = 0
    most = 0
    done: list[str] = []
    release = asyncio.Event()

    async def handler(key: str) -> None:
        nonlocal inside, most
        inside += 1
        most = max(most, inside)
        await release.wait()
        inside -= 1
        done.append(key)

    queue = KeyedQueue(handler, workers=5)
    for n in range(3):  # added before the queue runs: picked up when it starts
        queue.add(f"early{n}")
    running.append(Running(queue))
    for n in range(17):
        queue.add(f"k{n}")
    await settle()
    assert (inside, most) == (5, 5)
    assert workers_alive() == 5
    release.set()
    await settle()
    assert sorted(done) == sorted([f"early{n}" for n in range(3)] + [f"k{n}" for n in range(17)])
    assert most == 5
    assert workers_alive() == 0


async def test_starts_and_the_rest_take_turns_and_either_lane_alone_runs_at_full_pace(
    running: list[Running],
) -> None:
    done: list[str] = []

    async def handler(key: str) -> None:
        done.append(key)
        await asyncio.sleep(0)

    queue = KeyedQueue(handler, workers=1, starts=lambda key: key.startswith("new"))
    for n in range(4):
        queue.add(f"del{n}")
    for n in range(2):
        queue.add(f"new{n}")
    assert queue.depth() == 6
    running.append(Running(queue))
    await settle()
    assert done == ["new0", "del0", "new1", "del1", "del2", "del3"]
    done.clear()
    for n in range(3):
        queue.add(f"new{n + 2}")
    await settle()
    assert done == ["new2", "new3", "new4"]
    assert queue.depth() == 0 and not queue.busy()


async def _nothing(key: str) -> None:
    await asyncio.sleep(0)


def test_a_queue_costs_under_half_of_what_an_asyncio_queue_did() -> None:
    """One KeyedQueue per node: 3985 bytes each with its asyncio.Queue, 1506 now."""
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        queues = [KeyedQueue(_nothing, workers=2) for _ in range(200)]
        per_queue = (tracemalloc.get_traced_memory()[0] - before) / len(queues)
    finally:
        tracemalloc.stop()
    assert per_queue < 2048, f"{per_queue:.0f} bytes per queue"
