"""Polling, as an adapter: a backend that cannot push is made to push.

The pod controller only knows backends that call back when a pod may have changed
(`PushesStatus`). For one that cannot, `StatusPoller` asks it every `interval`
seconds for the state of each pod the controller holds in it (`known`), a few at a
time, and calls back for every pod whose state differs from the last look or that
the backend no longer has. The controller reads pod states through the same
adapter (`StatusFeed.get_pod_status`), so the last look is also the controller's own
last read: a first look that finds what the create's sync already read wakes
nothing. Virtual Kubelet's `syncProviderWrapper` does the same for its providers.
Listing the backend is left to adoption at start: on some backends it costs a call
per pod. A failing look is logged and tried again at the next interval.
`push_or_poll` gives the backend itself when it pushes, else a poller to run.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Iterable
from typing import Protocol

from vkpy.core.clock import SYSTEM_CLOCK, Clock
from vkpy.providers.base import PodRef, PodState, Provider, PushesStatus, StatusCallback
from vkpy.providers.errors import NotFoundError, ProviderError

log = logging.getLogger(__name__)

Known = Callable[[], Iterable[PodRef]]
"""The pods the caller holds in the backend."""

CONCURRENCY = 32
"""Status calls in flight at once."""


class StatusFeed(PushesStatus, Protocol):
    """Where the controller learns of changes and reads a pod's state."""

    async def get_pod_status(self, ref: PodRef) -> PodState: ...


class StatusPoller:
    """Pushes for a backend that cannot: `on_status_change`, then `run`."""

    def __init__(
        self,
        provider: Provider,
        interval: float,
        known: Known,
        clock: Clock = SYSTEM_CLOCK,
    ) -> None:
        self._provider = provider
        self._interval = interval
        self._known = known
        self._clock = clock
        self._callback: StatusCallback | None = None
        self._seen: dict[PodRef, PodState | None] = {}

    def on_status_change(self, callback: StatusCallback) -> None:
        self._callback = callback

    async def get_pod_status(self, ref: PodRef) -> PodState:
        """The backend's state of the pod, remembered as the last look at it."""
        try:
            state = await self._provider.get_pod_status(ref)
        except NotFoundError:
            self._seen[ref] = None
            raise
        self._seen[ref] = state
        return state

    async def run(self) -> None:
        while True:
            await self._clock.sleep(self._interval)
            await self.poll()

    async def poll(self) -> None:
        """One look at every known pod."""
        refs = sorted(set(self._known()))
        limit = asyncio.Semaphore(CONCURRENCY)
        failed: list[str] = []

        async def look(ref: PodRef) -> None:
            async with limit:
                try:
                    state: PodState | None = await self._provider.get_pod_status(ref)
                except NotFoundError:
                    state = None
                except ProviderError as error:
                    failed.append(f"{ref}: {error}")
                    return
            if ref not in self._seen or self._seen[ref] != state:
                self._seen[ref] = state
                if self._callback is not None:
                    self._callback(ref)

        await asyncio.gather(*(look(ref) for ref in refs))
        if failed:
            log.warning(
                "backend status poll failed", extra={"pods": len(failed), "first": failed[0]}
            )
        for ref in self._seen.keys() - set(refs):
            del self._seen[ref]


def push_or_poll(
    provider: Provider, interval: float, clock: Clock, known: Known
) -> tuple[StatusFeed, StatusPoller | None]:
    """The backend itself when it pushes; else a poller standing in for it (to be
    `run`): either way where changes come from and states are read."""
    if isinstance(provider, PushesStatus):
        return provider, None
    poller = StatusPoller(provider, interval, known, clock)
    return poller, poller
