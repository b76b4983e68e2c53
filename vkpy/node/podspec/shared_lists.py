"""One LIST answering every caller that asked while an earlier one was on the wire.

Each pod's environment needs its namespace's Services (`enableServiceLinks`). They
come from a watch (service_cache.py, as a kubelet's informer); while that watch cannot
list, pods list their namespace, and asking once per pod would make a burst of 1000
pods cost 1000 LISTs. Here the callers of one key queue behind the
LIST in flight, and the next LIST, sent when it ends, answers all of them at once.
Every caller still gets a list the API server made after its request arrived, so a
Service made before a pod was configured is always in its environment. A failed
LIST fails only the caller that sent it; the ones waiting send their own.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Generic, TypeVar

T = TypeVar("T")


@dataclass
class _Key(Generic[T]):
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    asked: int = 0  # requests numbered in the order they arrived
    answered: int = 0  # every request up to this number has `result`
    result: T | None = None


class SharedLists(Generic[T]):
    """`get(key)` is `fetch(key)`, shared by the callers that queued meanwhile."""

    def __init__(self, fetch: Callable[[str], Awaitable[T]]) -> None:
        self._fetch = fetch
        self._keys: dict[str, _Key[T]] = {}

    async def get(self, key: str) -> T:
        entry = self._keys.setdefault(key, _Key())
        entry.asked += 1
        mine = entry.asked
        async with entry.lock:
            if entry.answered >= mine and entry.result is not None:
                return entry.result
            covers = entry.asked  # this LIST starts after all of these requests
            result = await self._fetch(key)
            entry.result, entry.answered = result, covers
            if entry.asked == covers and self._keys.get(key) is entry:
                del self._keys[key]  # nobody waits: keep no list in memory
            return result
