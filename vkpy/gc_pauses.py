"""Keeps the cyclic garbage collector's pauses short and bounded: the agent runs the
collector itself.

A node with 10,000 pods holds millions of small objects (each watched pod is a tree
of dicts and lists, and the controller keeps the status it last decided next to
it). CPython's collector scans every tracked object of the oldest generation at each
full collection, and left to itself it runs one whenever enough survivors pile up:
on the shared 2-core machine one full collection over 20,000 pod trees took 5 to 9
seconds, during which the event loop answers nothing (issue 17).

Long-lived objects need not be scanned again and again, and young ones need not be
scanned three times. So CPython's own collections are switched off (`gc.disable`),
and every `period` (1 s) the agent collects once, then moves everything alive to
the permanent generation (`gc.freeze`). That collection scans only what was made
since the last freeze and is still alive, a second's worth however many pods the
node holds, and each object is scanned about once (CPython's schedule scanned the
survivors of a young generation again in the older ones: at 10,000 pods under
churn, 16 young collections a second, and full ones over some 50,000 objects).
Cyclic garbage made in between waits at most a `period`. Pods are trees without
cycles, so one that goes away later is still freed at once by reference counting;
what a freeze keeps from the collector is cyclic garbage among objects that were
alive at a freeze, so every `full_every` (an hour) everything is unfrozen and
collected once, the one long pause, logged with what it freed.

Before (freezing every 10 s, CPython's automatic full collections): with 10,000 pods
under churn, full collections of about 50,000 objects each, 30-60 ms of CPU and up to
0.5-1 s of wall time on the loaded machine. Pauses are counted in
`vkpy_gc_pause_seconds` by generation, to see this working.
"""

from __future__ import annotations

import gc
import logging
import time
from dataclasses import dataclass, field
from typing import Any, Protocol

from vkpy import metrics
from vkpy.clock import SYSTEM_CLOCK, Clock

log = logging.getLogger(__name__)


class Collector(Protocol):
    """The parts of `gc` used here (tests give a recording one)."""

    def freeze(self) -> None: ...

    def unfreeze(self) -> None: ...

    def collect(self, generation: int = 2) -> int: ...

    def isenabled(self) -> bool: ...

    def enable(self) -> None: ...

    def disable(self) -> None: ...


_started: dict[int, float] = {}


def _on_collection(phase: str, info: dict[str, Any]) -> None:
    generation = int(info.get("generation", 0))
    if phase == "start":
        _started[generation] = time.perf_counter()
        return
    began = _started.pop(generation, None)
    if began is not None:
        metrics.GC_PAUSE.labels(str(generation)).observe(time.perf_counter() - began)


def count_pauses() -> None:
    """Time every collection into `vkpy_gc_pause_seconds` (once per process)."""
    if _on_collection not in gc.callbacks:
        gc.callbacks.append(_on_collection)


@dataclass
class ScheduledCollections:
    """Collections on the agent's schedule: what is new every `period`, then a freeze;
    everything every `full_every`. CPython's automatic collections stay off while `run`
    runs (back on, and everything unfrozen, when it ends)."""

    period: float = 1.0
    full_every: float = 3600.0
    clock: Clock = SYSTEM_CLOCK
    collector: Collector = field(default_factory=lambda: gc)

    async def run(self) -> None:
        was_enabled = self.collector.isenabled()
        self.collector.disable()
        try:
            last_full = self.clock.monotonic()
            self.collector.collect()  # what start-up made (modules, the first pod list)
            self.collector.freeze()
            while True:
                await self.clock.sleep(self.period)
                if self.clock.monotonic() - last_full >= self.full_every:
                    self.collector.unfreeze()
                    began = time.perf_counter()
                    freed = self.collector.collect()
                    log.info(
                        "full garbage collection",
                        extra={"freed": freed, "seconds": round(time.perf_counter() - began, 3)},
                    )
                    last_full = self.clock.monotonic()
                else:
                    self.collector.collect()
                self.collector.freeze()
        finally:
            self.collector.unfreeze()
            if was_enabled:
                self.collector.enable()
