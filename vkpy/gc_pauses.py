"""Keeps the cyclic garbage collector from stopping the agent for seconds.

A node with 10,000 pods holds millions of small objects (each watched pod is a tree
of dicts and lists, and the controller keeps the status it last decided next to
it). CPython's collector scans every tracked object of the oldest generation at each
full collection, and under churn survivors pile up fast enough for one every few
tens of seconds: on the shared 2-core machine one full collection over 20,000 pod
trees took 5 to 9 seconds, during which the event loop answers nothing (issue 17:
`/pods` and `kubectl logs` p99 in seconds while the median was far lower).

Long-lived objects need not be scanned again and again. Every `period` (10 s) the objects
alive then are moved to the permanent generation (`gc.freeze`), so the collections in
between scan only what was made since; pods are trees without cycles, so one that
goes away later is still freed at once by reference counting. What a freeze keeps
from the collector is cyclic garbage among objects that were alive at a freeze, so
every `full_every` (an hour) everything is unfrozen and collected once (one full
pause, rare). With a minute between freezes, one full collection over the objects of
that minute still took over a second at 5000 pods on the loaded machine; freezing
itself costs next to nothing, so it is done every 10 s.
Pauses are counted in `vkpy_gc_pause_seconds` by generation, to see this working.
"""

from __future__ import annotations

import gc
import time
from dataclasses import dataclass, field
from typing import Any, Protocol

from vkpy import metrics
from vkpy.clock import SYSTEM_CLOCK, Clock


class Collector(Protocol):
    """The parts of `gc` used here (tests give a recording one)."""

    def freeze(self) -> None: ...

    def unfreeze(self) -> None: ...

    def collect(self, generation: int = 2) -> int: ...


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
class FreezeLongLived:
    """Freezes what is alive every `period`; unfreezes and collects every `full_every`."""

    period: float = 10.0
    full_every: float = 3600.0
    clock: Clock = SYSTEM_CLOCK
    collector: Collector = field(default_factory=lambda: gc)

    async def run(self) -> None:
        last_full = self.clock.monotonic()
        self.collector.freeze()  # what start-up made (modules, the first pod list)
        while True:
            await self.clock.sleep(self.period)
            if self.clock.monotonic() - last_full >= self.full_every:
                self.collector.unfreeze()
                self.collector.collect()
                last_full = self.clock.monotonic()
            self.collector.freeze()
