"""The time every controller and simulated backend reads, injectable for tests.

Controllers decide by time (back-off, active deadlines, token renewal, heartbeats)
and the sim backend runs pods on a clock. Reading `time.time()` and scheduling with
the event loop directly would make every such decision a real wait in tests; taking
a `Clock` instead lets unit tests move time forward by hand and see a day of a pod's
life in milliseconds. `SYSTEM_CLOCK` is the real one: wall time for what is written
to the API server, monotonic time and the event loop's timers for waiting.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Protocol


class Timer(Protocol):
    def cancel(self) -> None: ...


class Clock(Protocol):
    def time(self) -> float:
        """Wall time, epoch seconds (what timestamps on the API server are)."""

    def monotonic(self) -> float:
        """Seconds that never go backwards, for durations."""

    def call_later(self, delay: float, callback: Callable[[], None]) -> Timer:
        """Run `callback` on the event loop after `delay` seconds."""

    async def sleep(self, seconds: float) -> None:
        """Wait `seconds`."""


class SystemClock:
    """The real clock: `time`, and the running event loop's timers."""

    def time(self) -> float:
        return time.time()

    def monotonic(self) -> float:
        return time.monotonic()

    def call_later(self, delay: float, callback: Callable[[], None]) -> Timer:
        return asyncio.get_running_loop().call_later(max(0.0, delay), callback)

    async def sleep(self, seconds: float) -> None:
        await asyncio.sleep(seconds)


SYSTEM_CLOCK: Clock = SystemClock()


def utcnow(clock: Clock) -> datetime:
    """The clock's wall time as an aware UTC datetime."""
    return datetime.fromtimestamp(clock.time(), UTC)
