"""A small expiring cache for authentication and authorization answers.

Every kubelet API request would otherwise cost a TokenReview and a
SubjectAccessReview round trip to the API server; like the kubelet, answers are kept
for a while (each entry has its own time to live, so allowed and denied answers can
expire at different speeds). Bounded, least recently used first out, with an
injectable clock so tests need not sleep.

`SingleFlight` covers the moment before an answer is cached: the API server sends
twenty `kubectl exec` at once as twenty requests of its one client, and they share
one review instead of opening twenty connections for twenty identical ones.
"""

from __future__ import annotations

import asyncio
import time
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Hashable
from typing import Generic, TypeVar

K = TypeVar("K", bound=Hashable)
V = TypeVar("V")


class TtlCache(Generic[K, V]):
    def __init__(self, max_size: int = 4096, clock: Callable[[], float] = time.monotonic) -> None:
        self._max = max_size
        self._clock = clock
        self._entries: OrderedDict[K, tuple[float, V]] = OrderedDict()

    def get(self, key: K) -> V | None:
        """The cached value, or None when absent or expired."""
        entry = self._entries.get(key)
        if entry is None:
            return None
        expires, value = entry
        if self._clock() >= expires:
            del self._entries[key]
            return None
        self._entries.move_to_end(key)
        return value

    def put(self, key: K, value: V, ttl: float) -> None:
        if ttl <= 0:
            return
        self._entries[key] = (self._clock() + ttl, value)
        self._entries.move_to_end(key)
        while len(self._entries) > self._max:
            self._entries.popitem(last=False)

    def __len__(self) -> int:
        return len(self._entries)


class SingleFlight(Generic[K, V]):
    """Concurrent calls for one key share the first one's result (or its error)."""

    def __init__(self) -> None:
        self._running: dict[K, asyncio.Future[V]] = {}

    async def run(self, key: K, call: Callable[[], Awaitable[V]]) -> V:
        running = self._running.get(key)
        if running is None:
            running = asyncio.ensure_future(call())
            self._running[key] = running
            running.add_done_callback(lambda done: self._ended(key, done))
        # One waiter cancelled (its client went away) does not cancel the others' call.
        return await asyncio.shield(running)

    def _ended(self, key: K, done: asyncio.Future[V]) -> None:
        if self._running.get(key) is done:
            del self._running[key]
        if not done.cancelled():
            done.exception()  # retrieved: every waiter may have gone
