"""Heartbeat sleeps share one timer and wake in slots (vkpy/core/shared_timer.py)."""

from __future__ import annotations

import asyncio
import random
from collections.abc import Callable

from vkpy.core.clock import SYSTEM_CLOCK
from vkpy.core.shared_timer import SharedTimer


class Handle:
    def __init__(self, when: float, callback: Callable[[], None]) -> None:
        self.when, self.callback, self.cancelled = when, callback, False

    def cancel(self) -> None:
        self.cancelled = True


class ManualClock:
    """Time moves only when the test says; timers are counted."""

    def __init__(self) -> None:
        self.now = 1000.0
        self.timers: list[Handle] = []

    def time(self) -> float:
        return self.now

    def monotonic(self) -> float:
        return self.now

    def call_later(self, delay: float, callback: Callable[[], None]) -> Handle:
        handle = Handle(self.now + max(0.0, delay), callback)
        self.timers.append(handle)
        return handle

    def armed(self) -> list[Handle]:
        return [t for t in self.timers if not t.cancelled and t.when > -1]

    async def advance(self, seconds: float) -> None:
        end = self.now + seconds
        while True:
            due = [t for t in self.armed() if t.when <= end]
            if not due:
                break
            first = min(due, key=lambda t: t.when)
            self.now = max(self.now, first.when)
            first.when = -2  # fired
            first.callback()
            await asyncio.sleep(0)
        self.now = end
        for _ in range(3):
            await asyncio.sleep(0)


async def test_sleepers_wake_together_at_their_slot_and_not_before() -> None:
    clock = ManualClock()
    timer = SharedTimer(clock, resolution=0.1)
    woke: dict[str, float] = {}

    async def sleeper(name: str, seconds: float) -> None:
        await timer.sleep(seconds)
        woke[name] = clock.now

    tasks = [
        asyncio.create_task(sleeper("a", 10.03)),
        asyncio.create_task(sleeper("b", 10.07)),
        asyncio.create_task(sleeper("c", 10.25)),
    ]
    await asyncio.sleep(0)
    assert len(clock.armed()) == 1  # one timer for all three
    await clock.advance(10.0)
    assert woke == {}
    await clock.advance(0.1)
    assert set(woke) == {"a", "b"}
    assert woke["a"] == woke["b"] == clock.now
    await clock.advance(0.2)
    assert set(woke) == {"a", "b", "c"}
    assert 1010.25 <= woke["c"] <= 1010.35
    await asyncio.gather(*tasks)


async def test_an_earlier_sleeper_moves_the_one_timer_forward() -> None:
    clock = ManualClock()
    timer = SharedTimer(clock, resolution=0.1)
    late = asyncio.create_task(timer.sleep(30))
    await asyncio.sleep(0)
    early = asyncio.create_task(timer.sleep(1))
    await asyncio.sleep(0)
    assert len(clock.armed()) == 1
    assert clock.armed()[0].when == 1001.0
    await clock.advance(1.0)
    assert early.done() and not late.done()
    assert len(clock.armed()) == 1  # armed again, for the later slot
    await clock.advance(29.0)
    assert late.done()


async def test_a_cancelled_sleeper_leaves_the_others_to_wake() -> None:
    clock = ManualClock()
    timer = SharedTimer(clock, resolution=0.1)
    gone = asyncio.create_task(timer.sleep(5))
    kept = asyncio.create_task(timer.sleep(5))
    await asyncio.sleep(0)
    gone.cancel()
    await asyncio.sleep(0)
    await clock.advance(5.1)
    assert kept.done() and kept.exception() is None
    assert gone.cancelled()


async def test_a_thousand_spread_sleepers_arm_a_timer_per_slot_not_per_sleeper() -> None:
    clock = ManualClock()
    timer = SharedTimer(clock, resolution=0.1)
    sleepers = [asyncio.create_task(timer.sleep(random.uniform(0, 10))) for _ in range(1000)]
    await asyncio.sleep(0)
    await clock.advance(10.1)
    assert all(s.done() for s in sleepers)
    # one per 0.1 s slot, and one each time a sleeper earlier than all before it came
    # (about ln 1000 = 7 of them); a plain sleep each: 1000
    assert len(clock.timers) <= 101 + 20


async def test_on_the_real_clock_a_sleep_lasts_its_time_to_within_the_resolution() -> None:
    timer = SharedTimer(SYSTEM_CLOCK, resolution=0.05)
    loop = asyncio.get_running_loop()
    started = loop.time()
    await asyncio.gather(*(timer.sleep(0.2) for _ in range(50)))
    took = loop.time() - started
    assert 0.2 <= took < 0.2 + 0.05 + 0.2  # the slack: a loaded machine's scheduling
    await timer.sleep(0)  # no wait at all
