"""Keeps the cyclic garbage collector's pauses short and bounded: the agent runs the
collector on its own schedule.

A node with 10,000 pods holds millions of small objects (each watched pod is a tree
of dicts and lists, and the controller keeps the status it last decided next to
it). CPython's collector scans every tracked object of the oldest generation at each
full collection, and left to itself it runs one whenever enough survivors pile up:
on the shared 2-core machine one full collection over 20,000 pod trees took 5 to 9
seconds, during which the event loop answers nothing (issue 17).

Long-lived objects need not be scanned again and again. So CPython's own full
collections are switched off (the third threshold set out of reach; its young
collections stay, rarer, as a bound on a burst's garbage), and every `period` (1 s)
the agent collects everything not frozen itself, then moves everything alive to the
permanent generation (`gc.freeze`). That collection scans only what was made since
the last freeze and is still alive, a second's worth, however many pods the node
holds. Pods are trees without cycles, so one that goes away later is still freed at
once by reference counting; what a freeze keeps from the collector is cyclic
garbage among objects that were alive at a freeze. So when the frozen objects have
grown to `growth` (four) times what they were after the last full collection,
everything is unfrozen and collected once, the one long pause, logged with what it
freed: once or twice as a node fills up, and whenever garbage that escaped the
collections could make most of the heap. A node that keeps its size pays no more
long pauses. Little garbage is frozen in practice: at 2000 pods and 100 pods/s of
churn for two minutes with no full collection, the frozen objects went up and down
with the pods held (134,000-196,000), not up with time; hence four rather than two,
which at 10,000 pods made a third full collection, of over a second on the loaded
machine, fall in the churn. (At first this was
once an hour: one full collection of 10,000 pods held as decoded JSON took 0.16 s
for the bench's small pods and 0.66 s for 2.5 KB pods with a service account volume,
tolerations and five conditions, in a plain process on the quiet 2-core machine; the
agent holds more, and a loaded machine stretches it. A 10,000-pod node's kubelet API
stalled that long every hour for nothing when no garbage was frozen.)

Measured with bench/big_node.py (10,000 pods, 100 pods/s of churn, load 6-7;
docs/scale.md): before (freezing every 10 s, CPython's automatic collections), full
collections of about 50,000 objects each, 30-60 ms of CPU and up to 0.5-1 s of wall
time, and 16 young collections a second; the collector's wall time in the minute of
churn 5.4 s with the schedule above at CPython's young threshold (700), 2.3 s with
a young collection every 10,000 allocations (`young`: the agent's collection each
second comes first, so young ones only catch a burst), the longest pause under
250 ms at that load, settled RSS unchanged (224 MiB). Switching CPython's collections
off altogether left the settled RSS 80 MiB higher (a second's cyclic garbage at a
time during the 10,000-pod burst scatters the allocator's arenas), so the young
collections stay, as a bound. In a burst of 1000 pods (bench/peers.py, vkpy alone,
interleaved, load 2.7-4.3) the same change took the agent's CPU per pod from 3.71
and 3.59 ms to 3.42 and 3.44: about 800 tracked objects are decoded per pod (four
watch events, each a whole pod), mostly freed by reference counting before a young
collection at 10,000 comes, and at 700 the collector was 7% of the agent's CPU
(py-spy --native).
The frozen objects are counted every 30 s, not every period: CPython counts them by
walking their list, and at 1000 nodes with 10 pods each that count, once a second,
was a fifth of the agent's steady CPU (issue 30). After each count the C heap's free
pages are given back to the system (`trim_heap`).
Pauses are counted in `vkpy_gc_pause_seconds` by generation, to see this working.
"""

from __future__ import annotations

import ctypes
import gc
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

from vkpy.core import metrics
from vkpy.core.clock import SYSTEM_CLOCK, Clock

log = logging.getLogger(__name__)


class Collector(Protocol):
    """The parts of `gc` used here (tests give a recording one)."""

    def freeze(self) -> None: ...

    def unfreeze(self) -> None: ...

    def collect(self, generation: int = 2) -> int: ...

    def get_freeze_count(self) -> int: ...

    def get_threshold(self) -> tuple[int, int, int]: ...

    def set_threshold(
        self, threshold0: int, threshold1: int = ..., threshold2: int = ..., /
    ) -> None: ...


NEVER = 2**31 - 1
"""A third threshold CPython's collector never reaches: no automatic full collection."""

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


def _malloc_trim() -> Callable[[int], object] | None:
    try:
        return getattr(ctypes.CDLL(None), "malloc_trim", None)
    except OSError:
        return None


_MALLOC_TRIM: Callable[[int], object] | None = _malloc_trim()


def trim_heap() -> object:
    """Give the free pages inside the C heap back to the system (glibc's
    `malloc_trim(0)`; nothing elsewhere). glibc returns freed memory by itself only from
    the top of its heap, so the pages a burst freed below what is still held stay in
    the RSS for good: after 10,000 pods on 1000 nodes had started, 6.5 of the agent's
    109 MiB of anonymous memory were such pages (issue 30). Go's runtime returns them
    in the background; this does it every `check`. It takes under a millisecond."""
    return _MALLOC_TRIM(0) if _MALLOC_TRIM is not None else None


@dataclass
class ScheduledCollections:
    """Full collections on the agent's schedule: the new survivors every `period`, then
    a freeze; everything once the frozen objects, counted every `check`, have grown
    `growth`-fold since the last full collection. CPython's automatic full collections
    stay off while `run` runs (restored, and everything unfrozen, when it ends)."""

    period: float = 1.0
    growth: float = 4.0
    young: int = 10_000
    """Allocations between two of CPython's young collections (its default, 700, made
    16 a second under churn, each survivor then scanned again by the older ones)."""
    check: float = 30.0
    """Seconds between two counts of the frozen objects. `gc.get_freeze_count()` walks
    the whole permanent generation's list (46 ms for 2 million objects on the 2-core
    machine): counted every second, it was a fifth of the steady CPU of 1000 nodes with
    10 pods each (py-spy, issue 30). The growth it watches for takes minutes."""
    clock: Clock = SYSTEM_CLOCK
    collector: Collector = field(default_factory=lambda: gc)
    trim: Callable[[], object] = field(default_factory=lambda: trim_heap)
    """Run after the collection of every `check`: gives freed memory back (trim_heap)."""

    async def run(self) -> None:
        thresholds = self.collector.get_threshold()
        self.collector.set_threshold(max(thresholds[0], self.young), thresholds[1], NEVER)
        try:
            # What start-up made (modules, the first pod list): nothing is frozen yet.
            _, after_full = self._collect_and_freeze()
            counted, frozen = self.clock.monotonic(), after_full
            while True:
                await self.clock.sleep(self.period)
                due = self.clock.monotonic() - counted >= self.check
                if due:  # counting walks every frozen object: not every period
                    counted, frozen = self.clock.monotonic(), self.collector.get_freeze_count()
                    metrics.GC_FROZEN.set(frozen)
                if due and frozen >= self.growth * after_full:
                    after_full = self._full_collection(frozen)
                else:
                    self.collector.collect()
                    self.collector.freeze()
                if due:
                    self.trim()
        finally:
            self.collector.set_threshold(*thresholds)
            self.collector.unfreeze()

    def _full_collection(self, frozen: int) -> int:
        """Everything unfrozen and collected (the one long pause, logged): frozen now."""
        metrics.GC_FULL.inc()
        self.collector.unfreeze()
        began = time.perf_counter()
        freed, after_full = self._collect_and_freeze()
        log.info(
            "full garbage collection",
            extra={
                "freed": freed,
                "seconds": round(time.perf_counter() - began, 3),
                "frozen_before": frozen,
                "frozen_after": after_full,
            },
        )
        return after_full

    def _collect_and_freeze(self) -> tuple[int, int]:
        """Collect what is not frozen, freeze the rest: (objects freed, frozen now)."""
        freed = self.collector.collect()
        self.collector.freeze()
        frozen = self.collector.get_freeze_count()
        metrics.GC_FROZEN.set(frozen)
        return freed, frozen
