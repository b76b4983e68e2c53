"""The agent runs the full collections itself: the new survivors every period, then a
freeze; everything (unfrozen) only when the frozen objects have grown `growth`-fold
since the last time; CPython's own full collections off meanwhile."""

from __future__ import annotations

import asyncio
import contextlib
import gc
import weakref

from prometheus_client import REGISTRY

from tests.unit.fake_clock import FakeClock
from vkpy.app.gc_pauses import NEVER, ScheduledCollections, count_pauses, trim_heap


class Recording:
    def __init__(self, clock: FakeClock) -> None:
        self.clock = clock
        self.calls: list[tuple[str, float]] = []
        self.thresholds = (700, 10, 10)
        self.frozen: list[int] = []
        """What get_freeze_count answers, one value per call."""

    def freeze(self) -> None:
        self.calls.append(("freeze", self.clock.monotonic()))

    def unfreeze(self) -> None:
        self.calls.append(("unfreeze", self.clock.monotonic()))

    def collect(self, generation: int = 2) -> int:
        self.calls.append((f"collect {generation}", self.clock.monotonic()))
        return 0

    def get_freeze_count(self) -> int:
        return self.frozen.pop(0)

    def get_threshold(self) -> tuple[int, int, int]:
        return self.thresholds

    def set_threshold(self, threshold0: int, threshold1: int = 10, threshold2: int = 10, /) -> None:
        self.thresholds = (threshold0, threshold1, threshold2)


async def test_collects_the_new_survivors_each_period_and_everything_when_doubled() -> None:
    clock = FakeClock()
    recording = Recording(clock)
    # Frozen objects: after start-up, then at each period (and after a full collection).
    recording.frozen = [100, 150, 200, 120, 230, 240, 240, 300, 479]
    t0 = clock.monotonic()
    fulls_before = REGISTRY.get_sample_value("vkpy_gc_full_collections_total") or 0.0
    schedule = ScheduledCollections(period=1, check=1, growth=2, clock=clock, collector=recording)
    task = asyncio.create_task(schedule.run())
    await clock.advance(0)
    assert recording.thresholds == (10_000, 10, NEVER)  # young ones rarer, no full one
    await clock.advance(6.5)
    task.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await task
    assert [(what, when - t0) for what, when in recording.calls] == [
        ("collect 2", 0),  # what start-up made: 100 objects frozen
        ("freeze", 0),
        ("collect 2", 1),  # 150: only what survived since the last freeze is scanned
        ("freeze", 1),
        ("unfreeze", 2),  # 200, twice 100: the full collection, of everything
        ("collect 2", 2),
        ("freeze", 2),  # 120 left
        ("collect 2", 3),  # 230
        ("freeze", 3),
        ("unfreeze", 4),  # 240, twice 120
        ("collect 2", 4),
        ("freeze", 4),  # 240 left: nothing was garbage
        ("collect 2", 5),  # 300
        ("freeze", 5),
        ("collect 2", 6),  # 479, not yet twice 240
        ("freeze", 6),
        ("unfreeze", 6.5),  # stopped: everything back to the collector
    ]
    assert recording.frozen == []
    assert REGISTRY.get_sample_value("vkpy_gc_full_collections_total") == fulls_before + 2
    assert REGISTRY.get_sample_value("vkpy_gc_frozen_objects") == 479  # as an operator sees it
    assert recording.thresholds == (700, 10, 10)  # and its own schedule restored


def test_every_collection_is_timed_by_generation() -> None:
    count_pauses()
    count_pauses()  # once only

    def samples() -> float:
        value = REGISTRY.get_sample_value("vkpy_gc_pause_seconds_count", {"generation": "2"})
        return value or 0.0

    before = samples()
    gc.collect()
    assert samples() == before + 1


async def test_real_collector_frees_a_cycle_dropped_after_a_freeze_within_a_period() -> None:
    clock = FakeClock()
    before = gc.get_threshold()
    task = asyncio.create_task(ScheduledCollections(period=1, clock=clock).run())
    await clock.advance(0)
    try:
        assert gc.get_threshold() == (max(before[0], 10_000), before[1], NEVER)
        assert gc.get_freeze_count() > 0

        class Node:
            other: object = None

        first, second = Node(), Node()
        first.other, second.other = second, first
        gone = weakref.ref(first)
        gc.collect(1)  # past the young generations, as a long request's objects are
        del first, second
        await clock.advance(1)
        assert gone() is None
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
    assert gc.get_threshold() == before
    assert gc.get_freeze_count() == 0


async def test_real_collector_frees_a_frozen_cycle_once_the_frozen_objects_have_grown() -> None:
    """A cycle that was alive at a freeze escapes the periodic collections; it is freed
    when the heap has grown enough to be worth a full collection."""
    clock = FakeClock()
    schedule = ScheduledCollections(period=1, check=1, growth=1.5, clock=clock)
    task = asyncio.create_task(schedule.run())
    await clock.advance(0)
    try:

        class Node:
            other: object = None

        first, second = Node(), Node()
        first.other, second.other = second, first
        gone = weakref.ref(first)
        await clock.advance(1)  # frozen while alive
        del first, second
        await clock.advance(1)
        assert gone() is not None, "a frozen cycle is not scanned by the periodic collection"
        grown = [[] for _ in range(gc.get_freeze_count())]  # the node took more pods
        await clock.advance(1)  # frozen: now more than 1.5 times what it was
        assert gone() is not None
        await clock.advance(1)
        assert gone() is None
        del grown
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task


async def test_counts_the_frozen_objects_only_every_check_not_every_period() -> None:
    # gc.get_freeze_count() walks the whole permanent generation (46 ms for 2 million
    # objects): a node set of 1000 nodes and 10,000 pods spent a fifth of its steady
    # CPU counting them every second. The survivors are still collected each period.
    clock = FakeClock()
    recording = Recording(clock)
    recording.frozen = [100, 150, 160]
    t0 = clock.monotonic()
    trims: list[float] = []
    schedule = ScheduledCollections(
        period=1,
        check=5,
        growth=2,
        clock=clock,
        collector=recording,
        trim=lambda: trims.append(clock.monotonic() - t0),
    )
    task = asyncio.create_task(schedule.run())
    await clock.advance(0)
    await clock.advance(11.5)
    task.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await task
    assert recording.frozen == []  # counted at start-up, at 5 s and at 10 s, no more
    collects = [when - t0 for what, when in recording.calls if what == "collect 2"]
    assert collects == [0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11]
    unfrozen = [when - t0 for what, when in recording.calls if what == "unfreeze"]
    assert unfrozen == [11.5]  # 160 at 10 s, not twice 100: no full collection; then stopped
    assert trims == [5, 10]  # the freed heap given back after each counted collection


def test_trimming_the_heap_gives_freed_pages_back() -> None:
    def anonymous_kib() -> int:
        with open("/proc/self/status") as status:
            line = next(line for line in status if line.startswith("RssAnon:"))
        return int(line.split()[1])

    keep = [bytearray(600) for _ in range(60_000)]  # 36 MB in glibc's heap (not pymalloc)
    last = bytearray(600)  # held: the heap's top stays, glibc alone returns nothing
    del keep
    before = anonymous_kib()
    trim_heap()
    after = anonymous_kib()
    assert after < before - 16_000, (before, after)
    del last
