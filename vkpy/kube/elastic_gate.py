"""API requests in flight: a few while the node keeps up, more while it is behind.

A node's API requests go out first come, first served, a fixed number at once (the
client's gate). Few is what keeps a pod burst from crowding the API server while
others write to it: with 16 status patches in flight a burst of 1000 pods made the
creating clients' own requests take 1.43 times as long as beside kwok, with 4, 1.05
times (issue 30). But few is also a ceiling on how fast a node catches up: HTTP/1.1
carries one request per connection, so 4 in flight at 50 ms each carry 80 a second.
Under 100 pods a second created and deleted (each a status patch and a delete, and
Events) one node with 4 in flight fell behind within a minute, without any fault; with
this gate it did 57 % more of the deletes by 120 s (docs/benchmarks.md; on 2 cores
the whole stack still did not keep up).

So the gate admits `floor` requests at once and doubles that, up to `ceiling`, for
each `patience` seconds that requests have been waiting for a turn without a break: a
burst that drains within `patience` sees `floor`, a backlog that lasts gets more. Once
nobody has waited for `patience` seconds the limit steps back down by one each
`patience`. Turns are handed out in arrival order; a waiter cancelled (its timeout)
gives up its place.

Background requests (Events: for people, not for controllers) take a turn only when
nothing else is in flight or waits, or once one has waited `patience` seconds (then
in a free turn no other request waits for). A node sends its Events one at a time,
and in a burst of 1000 pods that one Event in flight held one of the 4 turns through
most of the burst, so the pods' status patches had three. Queued behind waiting
requests only, Events still went out during the burst (0.12 a pod): the pod workers
leave a turn free between two writes often enough (issue 30). Background requests
waiting do not grow the limit: that is for a backlog of the node's own work.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections import deque
from collections.abc import Callable

log = logging.getLogger(__name__)


class ElasticGate:
    """A FIFO semaphore whose size moves between `floor` and `ceiling` (see the module
    docstring). `acquire`, `release` and `locked` as `asyncio.Semaphore`'s."""

    def __init__(
        self,
        floor: int,
        ceiling: int | None = None,
        patience: float = 10.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if floor < 1:
            raise ValueError(f"floor {floor}: at least one request must go out")
        self.floor = floor
        self.ceiling = max(floor, ceiling if ceiling is not None else floor)
        self.limit = floor
        """Requests admitted at once now."""
        self._patience = patience
        self._clock = clock
        self._in_flight = 0
        self._waiters: deque[tuple[float, asyncio.Future[None]]] = deque()
        """Requests waiting for a turn, each with when it began to (monotonic)."""
        self._background: deque[tuple[float, asyncio.Future[None]]] = deque()
        """Background requests waiting: they go when nothing else is in flight or
        waits, or after `patience` when `_waiters` is empty."""
        self._queued = False
        """Whether requests (not background ones) are waiting for a turn."""
        self._since = clock()
        """When `_queued` last changed, or the limit (monotonic)."""

    @property
    def in_flight(self) -> int:
        return self._in_flight

    @property
    def waiting(self) -> int:
        return len(self._waiters) + len(self._background)

    def locked(self, background: bool = False) -> bool:
        """Whether an `acquire` now would wait."""
        if self._in_flight >= self.limit or self._waiters:
            return True
        return background and (self._in_flight > 0 or bool(self._background))

    async def acquire(self, background: bool = False) -> None:
        """A turn; `background`: once no other request is in flight or waits (or after
        `patience`, in a turn no other request waits for)."""
        self._adjust()
        if not self.locked(background):
            self._in_flight += 1
            return
        line = self._background if background else self._waiters
        waiter: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        entry = (self._clock(), waiter)
        line.append(entry)
        self._mark()
        try:
            await waiter
        except asyncio.CancelledError:
            if waiter.done() and not waiter.cancelled():
                self.release()  # the turn came with the cancellation: hand it on
            else:
                with contextlib.suppress(ValueError):  # already passed over by `_admit`
                    line.remove(entry)
                self._mark()
            raise

    def release(self) -> None:
        self._in_flight -= 1
        self._adjust()
        self._admit()

    def _admit(self) -> None:
        while self._in_flight < self.limit:
            if self._waiters:
                _, waiter = self._waiters.popleft()
            elif self._background and self._background_may_go():
                _, waiter = self._background.popleft()
            else:
                break
            if not waiter.done():  # else cancelled, not yet gone from the queue
                self._in_flight += 1
                waiter.set_result(None)
        self._mark()

    def _background_may_go(self) -> bool:
        """Nothing else in flight, or the first background request waited `patience`."""
        return self._in_flight == 0 or self._clock() - self._background[0][0] >= self._patience

    def _mark(self) -> None:
        """Note when requests started or stopped waiting."""
        queued = bool(self._waiters)
        if queued != self._queued:
            self._queued, self._since = queued, self._clock()

    def _adjust(self) -> None:
        """Double the limit after `patience` s queued; one less after `patience` calm."""
        now = self._clock()
        if now - self._since < self._patience:
            return
        if self._queued and self.limit < self.ceiling:
            self._set(min(self.ceiling, self.limit * 2), now, "requests waited for a turn")
            self._admit()
        elif not self._queued and self.limit > self.floor:
            self._set(self.limit - 1, now, "no request waited")

    def _set(self, limit: int, now: float, why: str) -> None:
        log.info(
            "API requests in flight at once changed",
            extra={"from": self.limit, "to": limit, "why": f"{why} for {now - self._since:.0f} s"},
        )
        self.limit, self._since = limit, now
