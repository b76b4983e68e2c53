"""A clock that moves only when a test says so, for vkpy.core.clock.Clock users.

`advance(seconds)` runs every timer that falls due, in order, letting the event loop
run the work each one wakes (`settle`) before moving on, so a test sees a day of a
pod's life in milliseconds and in a deterministic order.
"""

from __future__ import annotations

import asyncio
import heapq
import itertools
from collections.abc import Callable

from vkpy.core.clock import SystemClock

START = 1_800_000_000.0  # 2027-01-15, an arbitrary but fixed wall time


async def settle(rounds: int = 300) -> None:
    """Let every ready task run until the loop has nothing left to do right now."""
    for _ in range(rounds):
        await asyncio.sleep(0)


class FakeTimer:
    def __init__(self, when: float, callback: Callable[[], None]) -> None:
        self.when = when
        self.callback = callback
        self.cancelled = False

    def cancel(self) -> None:
        self.cancelled = True


class FakeClock:
    def __init__(self, start: float = START) -> None:
        self._now = start
        self._start = start
        self._timers: list[tuple[float, int, FakeTimer]] = []
        self._seq = itertools.count()

    def time(self) -> float:
        return self._now

    def monotonic(self) -> float:
        return self._now - self._start + 1000.0

    def call_later(self, delay: float, callback: Callable[[], None]) -> FakeTimer:
        timer = FakeTimer(self._now + max(0.0, delay), callback)
        heapq.heappush(self._timers, (timer.when, next(self._seq), timer))
        return timer

    async def sleep(self, seconds: float) -> None:
        future: asyncio.Future[None] = asyncio.get_running_loop().create_future()

        def wake() -> None:
            if not future.done():
                future.set_result(None)

        timer = self.call_later(seconds, wake)
        try:
            await future
        finally:
            timer.cancel()

    def pending(self) -> list[float]:
        """When the timers still armed fire, relative to now."""
        return sorted(t.when - self._now for _, _, t in self._timers if not t.cancelled)

    async def advance(self, seconds: float) -> None:
        """Move time forward by `seconds`, firing what falls due on the way."""
        target = self._now + seconds
        await settle()
        while self._timers and self._timers[0][0] <= target:
            when, _, timer = heapq.heappop(self._timers)
            if timer.cancelled:
                continue
            self._now = max(self._now, when)
            timer.callback()
            await settle()
        self._now = target
        await settle()


class NoWaitClock(SystemClock):
    """The real clock, but `sleep` returns after one turn of the event loop and records
    the delay it was asked for: for retry loops a test runs flat out while it checks
    their back-off."""

    def __init__(self) -> None:
        self.delays: list[float] = []

    async def sleep(self, seconds: float) -> None:
        self.delays.append(seconds)
        await asyncio.sleep(0)
