"""A work queue that never runs two operations on one pod at once.

Pods are reconciled by key (their UID). Adding a key that is waiting does nothing
(changes coalesce); adding a key that is being processed makes it run once more
after the current run ends. A fixed number of workers bound the parallelism across
pods; they are started when keys are queued and end when none are left, so an idle
node (one of a thousand in a node set) keeps no task waiting. A key can be woken
later for several reasons at once (its back-off, a deadline, a token renewal, a
poll), each with a timer of its own, so one never
cancels or delays another; the queue knows the reasons only as names. A handler
that raises `Retry` (or fails) comes back after a per-key exponential back-off,
which a normal return resets. This is the shape of client-go's workqueue, which the
kubelet's pod workers share.

Keys that start something new (a pod to create, told by the `starts` callable) wait
in a lane of their own, and the workers take from it and from the rest in turn. With
one first-come line, a new pod waited behind every delete and resync that came due
before it (tests/unit/node/pods/test_pod_lifecycle.py: 20 deletes, then the new pod).
The kubelet has a goroutine per pod and no such line; taking the lanes in turn gives
new pods at least half of the workers' turns under a backlog, and changes nothing
when one lane is empty. It adds no throughput: a node more than a pod's lifetime
behind (issue 30's soak at 100 pods/s on 2 cores) still sees its pods deleted before
their turn comes.
"""

from __future__ import annotations

import asyncio
import logging
import random
from collections import deque
from collections.abc import Awaitable, Callable

from vkpy.core import metrics
from vkpy.core.clock import SYSTEM_CLOCK, Clock, Timer

log = logging.getLogger(__name__)

Handler = Callable[[str], Awaitable[None]]
Starts = Callable[[str], bool]
"""Whether handling the key now starts something new (its lane; see above)."""

BACKOFF = "backoff"
"""The reason of the timer a failed handler leaves behind."""


class Retry(Exception):
    """Raised by a handler for an expected, transient failure: retried with back-off
    and logged as a warning without a traceback. `max_delay` caps that back-off (a
    pod waiting for a ConfigMap is tried at least that often); `after` is a floor
    that no cap lowers (a throttled backend's Retry-After: not sooner than that)."""

    def __init__(
        self,
        message: str,
        max_delay: float | None = None,
        quiet: bool = False,
        after: float | None = None,
    ):
        super().__init__(message)
        self.max_delay = max_delay
        self.quiet = quiet
        """Logged at info level: an expected wait, already reported elsewhere."""
        self.after = after


class KeyedQueue:
    """Serial per key, parallel across keys, with retries and timers by reason."""

    def __init__(
        self,
        handler: Handler,
        workers: int,
        base_backoff: float = 0.2,
        max_backoff: float = 30.0,
        clock: Clock = SYSTEM_CLOCK,
        starts: Starts | None = None,
    ) -> None:
        self._handler = handler
        self._starts = starts
        self._workers = workers
        self._base = base_backoff
        self._max = max_backoff
        self._clock = clock
        # a plain deque, not an asyncio.Queue (four deques and an Event per node): no
        # worker ever waits on it, the ones running take keys until it is empty
        self._queue: deque[str] = deque()
        self._fresh: deque[str] | None = None
        """The keys that start something (made on the first: most nodes never have a
        backlog, and a deque is about 600 bytes)."""
        self._fresh_turn = True
        self._group: asyncio.TaskGroup | None = None
        self._alive = 0  # workers started and not yet ended
        self._started = 0  # for the workers' task names
        self._dirty: set[str] = set()
        self._processing: set[str] = set()
        self._failures: dict[str, int] = {}
        self._timers: dict[tuple[str, str], tuple[float, Timer]] = {}

    def add(self, key: str) -> None:
        """Process `key` soon (once, however often it is added before that)."""
        if key in self._dirty:
            return
        self._dirty.add(key)
        if key not in self._processing:
            self._put(key)

    def _put(self, key: str) -> None:
        self._enqueue(key)
        self._more_workers()

    def _enqueue(self, key: str) -> None:
        if self._starts is not None and self._starts(key):
            if self._fresh is None:
                self._fresh = deque()
            self._fresh.append(key)
        else:
            self._queue.append(key)
        metrics.POD_QUEUE_DEPTH.set(self.depth())

    def _next(self) -> str:
        """The next key: from the lane whose turn it is, or the other when it is empty."""
        fresh = self._fresh
        if fresh and (self._fresh_turn or not self._queue):
            self._fresh_turn = False
            key = fresh.popleft()
        else:
            self._fresh_turn = True
            key = self._queue.popleft()
        metrics.POD_QUEUE_DEPTH.set(self.depth())
        return key

    def _more_workers(self) -> None:
        """A worker for each queued key no free worker will take, up to `workers`
        alive (once `run` runs). A worker is busy while it holds a key (`_processing`);
        one started and not yet holding one will take a queued key."""
        group = self._group
        if group is None:
            return
        while self._alive < self._workers and self.depth() > self._alive - len(self._processing):
            self._alive += 1
            self._started += 1
            group.create_task(self._work(), name=f"pod-worker-{self._started}")

    def add_after(self, key: str, delay: float, reason: str) -> None:
        """Process `key` after `delay` seconds, for `reason`: replaces the key's
        earlier timer for the same reason, leaves its other timers alone."""
        self.cancel(key, reason)
        when = self._clock.monotonic() + max(0.0, delay)

        def fire() -> None:
            self._timers.pop((key, reason), None)
            self.add(key)

        self._timers[(key, reason)] = (when, self._clock.call_later(max(0.0, delay), fire))

    def schedule(self, key: str, reason: str, delay: float | None) -> None:
        """The key's timer for `reason` fires after `delay` seconds (None: it has
        none). A timer already armed for that moment is kept, not armed again."""
        if delay is None:
            self.cancel(key, reason)
            return
        armed = self._timers.get((key, reason))
        if armed is not None and abs(armed[0] - (self._clock.monotonic() + delay)) < 0.001:
            return
        self.add_after(key, delay, reason)

    def due_in(self, key: str, reason: str) -> float | None:
        """Seconds until the key's timer for `reason` fires (None: none armed)."""
        timer = self._timers.get((key, reason))
        return None if timer is None else timer[0] - self._clock.monotonic()

    def cancel(self, key: str, reason: str) -> None:
        timer = self._timers.pop((key, reason), None)
        if timer is not None:
            timer[1].cancel()

    def retry_later(
        self, key: str, max_delay: float | None = None, after: float | None = None
    ) -> float:
        """Schedule a retry with this key's back-off, no sooner than `after` seconds
        when given; returns the delay chosen."""
        failures = self._failures.get(key, 0) + 1
        self._failures[key] = failures
        cap = self._max if max_delay is None else min(self._max, max_delay)
        delay = min(cap, self._base * 2.0 ** min(failures - 1, 30)) * random.uniform(0.9, 1.1)
        if after is not None:
            delay = max(delay, after)
        self.add_after(key, delay, BACKOFF)
        return delay

    def forget(self, key: str) -> None:
        """Reset the key's back-off (its other timers stay)."""
        self._failures.pop(key, None)
        self.cancel(key, BACKOFF)

    def drop(self, key: str) -> None:
        """The key is gone for good: its back-off and every timer go too."""
        self._failures.pop(key, None)
        for timer_key in [k for k in self._timers if k[0] == key]:
            self.cancel(*timer_key)

    def running(self, key: str) -> bool:
        """Whether the handler is working on `key` right now."""
        return key in self._processing

    def depth(self) -> int:
        return len(self._queue) + (len(self._fresh) if self._fresh else 0)

    def busy(self) -> bool:
        return bool(self._dirty or self._processing)

    async def run(self) -> None:
        """Start workers as keys come, until cancelled."""
        try:
            async with asyncio.TaskGroup() as group:
                self._group = group
                try:
                    self._more_workers()  # keys added before the start
                    await asyncio.Future()  # until cancelled
                finally:
                    self._group = None
        finally:
            for _, timer in self._timers.values():
                timer.cancel()
            self._timers.clear()

    async def _work(self) -> None:
        try:
            await self._take_keys()
        finally:
            self._alive -= 1

    async def _take_keys(self) -> None:
        while self._queue or self._fresh:
            key = self._next()
            self._dirty.discard(key)
            self._processing.add(key)
            try:
                await self._handler(key)
                self.forget(key)
            except asyncio.CancelledError:
                raise
            except Retry as error:
                delay = self.retry_later(key, error.max_delay, error.after)
                log.log(
                    logging.INFO if error.quiet else logging.WARNING,
                    "pod sync will be retried",
                    extra={"uid": key, "error": str(error), "retry_in": round(delay, 2)},
                )
            except Exception:
                delay = self.retry_later(key)
                log.exception("pod sync failed", extra={"uid": key, "retry_in": round(delay, 2)})
            finally:
                self._processing.discard(key)
                if key in self._dirty:
                    self._enqueue(key)  # this worker, or another, takes it
