"""A one-way `asyncio.Event` for objects that exist once per node.

`asyncio.Event` makes the deque of its waiters when it is made (624 bytes for an
empty one), and a node of a set held two of them, "registered" and "ready", that
nobody waits on after the node's first seconds: 1.7 KiB per node by tracemalloc,
1.7 MiB at 1000 nodes (issue 30). `Flag` keeps the waiters' futures in a list made on
the first wait and dropped once set, and has no `clear`: a flag that is set stays set.
"""

from __future__ import annotations

import asyncio


class Flag:
    """Set once; `wait` returns at once when set, else when `set` is called."""

    __slots__ = ("_set", "_waiters")

    def __init__(self) -> None:
        self._set = False
        self._waiters: list[asyncio.Future[None]] | None = None

    def is_set(self) -> bool:
        return self._set

    def set(self) -> None:
        if self._set:
            return
        self._set = True
        waiters, self._waiters = self._waiters or [], None
        for waiter in waiters:
            if not waiter.done():
                waiter.set_result(None)

    async def wait(self) -> bool:
        """True once set (as `asyncio.Event.wait`); a cancelled waiter leaves no trace."""
        if self._set:
            return True
        waiter = asyncio.get_running_loop().create_future()
        if self._waiters is None:
            self._waiters = []
        self._waiters.append(waiter)
        try:
            await waiter
        finally:
            if self._waiters is not None and waiter in self._waiters:
                self._waiters.remove(waiter)
        return True
