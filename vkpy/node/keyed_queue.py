"""A work queue that never runs two operations on one pod at once.

Pods are reconciled by key (their UID). Adding a key that is waiting does nothing
(changes coalesce); adding a key that is being processed makes it run once more
after the current run ends. A fixed number of workers bound the parallelism across
pods, and a key whose handler failed comes back after a per-key exponential backoff.
This is the shape of client-go's workqueue, which the kubelet's pod workers share.
"""

from __future__ import annotations

import asyncio
import logging
import random
from collections.abc import Awaitable, Callable

from vkpy import metrics

log = logging.getLogger(__name__)

Handler = Callable[[str], Awaitable[None]]


class Retry(Exception):
    """Raised by a handler for an expected, transient failure: retried with backoff and
    logged as a warning without a traceback."""


class KeyedQueue:
    """Serial per key, parallel across keys, with retries."""

    def __init__(
        self,
        handler: Handler,
        workers: int,
        base_backoff: float = 0.2,
        max_backoff: float = 30.0,
    ) -> None:
        self._handler = handler
        self._workers = workers
        self._base = base_backoff
        self._max = max_backoff
        self._queue: asyncio.Queue[str] = asyncio.Queue()
        self._dirty: set[str] = set()
        self._processing: set[str] = set()
        self._failures: dict[str, int] = {}
        self._timers: dict[str, asyncio.TimerHandle] = {}

    def add(self, key: str) -> None:
        """Process `key` soon (once, however often it is added before that)."""
        if key in self._dirty:
            return
        self._dirty.add(key)
        if key not in self._processing:
            self._queue.put_nowait(key)
            metrics.POD_QUEUE_DEPTH.set(self._queue.qsize())

    def add_after(self, key: str, delay: float) -> None:
        """Process `key` after `delay` seconds (an earlier `add_after` is replaced
        only when this one is sooner)."""
        loop = asyncio.get_running_loop()
        when = loop.time() + delay
        timer = self._timers.get(key)
        if timer is not None and not timer.cancelled() and timer.when() <= when:
            return
        if timer is not None:
            timer.cancel()

        def fire() -> None:
            self._timers.pop(key, None)
            self.add(key)

        self._timers[key] = loop.call_at(when, fire)

    def retry_later(self, key: str) -> float:
        """Schedule a retry with this key's backoff; returns the delay chosen."""
        failures = self._failures.get(key, 0) + 1
        self._failures[key] = failures
        delay = min(self._max, self._base * 2.0 ** (failures - 1)) * random.uniform(0.9, 1.1)
        self.add_after(key, delay)
        return delay

    def forget(self, key: str) -> None:
        """Reset the key's backoff and cancel its timers."""
        self._failures.pop(key, None)
        timer = self._timers.pop(key, None)
        if timer is not None:
            timer.cancel()

    def depth(self) -> int:
        return self._queue.qsize()

    def busy(self) -> bool:
        return bool(self._dirty or self._processing)

    async def run(self) -> None:
        """Run the workers until cancelled."""
        try:
            async with asyncio.TaskGroup() as group:
                for n in range(self._workers):
                    group.create_task(self._work(), name=f"pod-worker-{n}")
        finally:
            for timer in self._timers.values():
                timer.cancel()

    async def _work(self) -> None:
        while True:
            key = await self._queue.get()
            metrics.POD_QUEUE_DEPTH.set(self._queue.qsize())
            self._dirty.discard(key)
            self._processing.add(key)
            try:
                await self._handler(key)
                self._failures.pop(key, None)
            except asyncio.CancelledError:
                raise
            except Retry as error:
                delay = self.retry_later(key)
                log.warning(
                    "pod sync will be retried",
                    extra={"uid": key, "error": str(error), "retry_in": round(delay, 2)},
                )
            except Exception:
                delay = self.retry_later(key)
                log.exception("pod sync failed", extra={"uid": key, "retry_in": round(delay, 2)})
            finally:
                self._processing.discard(key)
                if key in self._dirty:
                    self._queue.put_nowait(key)
