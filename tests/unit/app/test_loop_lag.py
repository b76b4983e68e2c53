"""The agent records how late its event loop wakes a sleeping task."""

from __future__ import annotations

import asyncio
import contextlib

from prometheus_client import REGISTRY

from tests.unit.fake_clock import FakeClock
from vkpy.app.loop_lag import LoopLag


def _count() -> float:
    return REGISTRY.get_sample_value("vkpy_event_loop_lag_seconds_count") or 0.0


async def test_each_wake_up_is_recorded() -> None:
    clock = FakeClock()
    before = _count()
    task = asyncio.create_task(LoopLag(interval=0.1, clock=clock).run())
    await clock.advance(1.05)
    task.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await task
    assert _count() - before == 10
