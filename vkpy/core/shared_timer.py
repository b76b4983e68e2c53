"""Many tasks' long sleeps on one event-loop timer, woken together in slots.

One process hosting 1000 nodes has 2000 heartbeat loops (a Lease and a status check
per node), each sleeping about 10 s at a time: through `asyncio.sleep` that was 200
timer handles a second pushed into and popped from a heap of 2000 (each comparison a
Python call) and as many turns of the event loop, each with its own `epoll` call; the
loop's own work was a third of a 1000-node agent's steady CPU (issue 30). Here a
sleep joins the slot of its deadline rounded up to `resolution` (0.1 s: a Lease
renewed 0.1 s late is still 0.9 s early), one timer is armed for the earliest slot,
and every sleeper of a slot wakes in the same turn of the loop. It is a `Clock`, so the
heartbeat loops take it where they took the host's clock.
"""

from __future__ import annotations

import asyncio
import heapq
import math
from collections.abc import Callable

from vkpy.core.clock import Clock, Timer


class SharedTimer:
    """`clock`, with `sleep` for many tasks on one of its timers (see the module
    docstring)."""

    def __init__(self, clock: Clock, resolution: float = 0.1) -> None:
        self._clock = clock
        self._resolution = resolution
        self._slots: dict[int, list[asyncio.Future[None]]] = {}
        self._due: list[int] = []
        """The slots waited for, a heap."""
        self._timer: Timer | None = None
        self._armed: int | None = None
        """The slot the timer is armed for."""

    def time(self) -> float:
        return self._clock.time()

    def monotonic(self) -> float:
        return self._clock.monotonic()

    def call_later(self, delay: float, callback: Callable[[], None]) -> Timer:
        return self._clock.call_later(delay, callback)

    async def sleep(self, seconds: float) -> None:
        """Wait `seconds`, or up to `resolution` more."""
        if seconds <= 0:
            await asyncio.sleep(0)
            return
        slot = math.ceil((self._clock.monotonic() + seconds) / self._resolution)
        future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        sleepers = self._slots.get(slot)
        if sleepers is None:
            self._slots[slot] = [future]
            heapq.heappush(self._due, slot)
            if self._armed is None or slot < self._armed:
                self._arm(slot)
        else:
            sleepers.append(future)
        await future

    def _arm(self, slot: int) -> None:
        if self._timer is not None:
            self._timer.cancel()
        self._armed = slot
        self._timer = self._clock.call_later(
            slot * self._resolution - self._clock.monotonic(), self._wake
        )

    def _wake(self) -> None:
        self._timer = self._armed = None
        reached = self._clock.monotonic() / self._resolution + 1e-6
        while self._due and self._due[0] <= reached:
            for future in self._slots.pop(heapq.heappop(self._due)):
                if not future.done():  # a cancelled sleeper is skipped
                    future.set_result(None)
        if self._due:
            self._arm(self._due[0])
