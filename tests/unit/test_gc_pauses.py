"""The agent freezes long-lived objects every period and collects fully only rarely."""

from __future__ import annotations

import asyncio
import contextlib
import gc

from prometheus_client import REGISTRY

from tests.unit.fake_clock import FakeClock
from vkpy.gc_pauses import FreezeLongLived, count_pauses


class Recording:
    def __init__(self, clock: FakeClock) -> None:
        self.clock = clock
        self.calls: list[tuple[str, float]] = []

    def freeze(self) -> None:
        self.calls.append(("freeze", self.clock.monotonic()))

    def unfreeze(self) -> None:
        self.calls.append(("unfreeze", self.clock.monotonic()))

    def collect(self, generation: int = 2) -> int:
        self.calls.append((f"collect {generation}", self.clock.monotonic()))
        return 0


async def test_freezes_each_period_and_collects_everything_every_full_period() -> None:
    clock = FakeClock()
    recording = Recording(clock)
    t0 = clock.monotonic()
    freezer = FreezeLongLived(period=60, full_every=180, clock=clock, collector=recording)
    task = asyncio.create_task(freezer.run())
    await clock.advance(400)
    task.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await task
    assert [(what, when - t0) for what, when in recording.calls] == [
        ("freeze", 0),
        ("freeze", 60),
        ("freeze", 120),
        ("unfreeze", 180),
        ("collect 2", 180),
        ("freeze", 180),
        ("freeze", 240),
        ("freeze", 300),
        ("unfreeze", 360),
        ("collect 2", 360),
        ("freeze", 360),
    ]


def test_every_collection_is_timed_by_generation() -> None:
    count_pauses()
    count_pauses()  # once only

    def samples() -> float:
        value = REGISTRY.get_sample_value("vkpy_gc_pause_seconds_count", {"generation": "2"})
        return value or 0.0

    before = samples()
    gc.collect()
    assert samples() == before + 1
