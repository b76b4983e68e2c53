"""Measures how late the event loop runs what is ready (`vkpy_event_loop_lag_seconds`).

Everything in the agent shares one event loop, so a kubelet API request's time is its
own work plus its waits for the loop: behind the pod controller's steps, a `/pods`
answer's chunks, a garbage collection. The handler histograms show the first; this
shows the second: a task that sleeps `interval` and records how much later than
asked it woke (issue 17: `/containerLogs` took tens of milliseconds on a loop that
was mostly idle, while its handler took under 25 ms).
"""

from __future__ import annotations

from dataclasses import dataclass

from vkpy.core import metrics
from vkpy.core.clock import SYSTEM_CLOCK, Clock


@dataclass
class LoopLag:
    """Sleeps `interval` again and again, recording each wake-up's lateness."""

    interval: float = 0.1
    clock: Clock = SYSTEM_CLOCK

    async def run(self) -> None:
        while True:
            began = self.clock.monotonic()
            await self.clock.sleep(self.interval)
            late = self.clock.monotonic() - began - self.interval
            metrics.EVENT_LOOP_LAG.observe(max(0.0, late))
