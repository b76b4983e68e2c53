"""Polling, as an adapter: a backend that cannot push is made to push.

The pod controller only knows backends that call back when a pod may have changed
(`PushesStatus`). For one that cannot, `StatusPoller` asks it every `interval`
seconds for the pods it holds and their state, and calls back for every pod whose
state differs from the last look, appeared, or vanished. Virtual Kubelet's
`syncProviderWrapper` does the same for its providers. A failing look is logged and
tried again at the next interval.
"""

from __future__ import annotations

import logging

from vkpy.clock import SYSTEM_CLOCK, Clock
from vkpy.providers.base import PodRef, PodState, Provider, PushesStatus, StatusCallback
from vkpy.providers.errors import NotFoundError, ProviderError

log = logging.getLogger(__name__)


class StatusPoller:
    """Pushes for a backend that cannot: `on_status_change`, then `run`."""

    def __init__(self, provider: Provider, interval: float, clock: Clock = SYSTEM_CLOCK) -> None:
        self._provider = provider
        self._interval = interval
        self._clock = clock
        self._callback: StatusCallback | None = None
        self._seen: dict[PodRef, PodState | None] = {}

    def on_status_change(self, callback: StatusCallback) -> None:
        self._callback = callback

    async def run(self) -> None:
        while True:
            await self._clock.sleep(self._interval)
            try:
                await self.poll()
            except ProviderError as error:
                log.warning("backend status poll failed", extra={"error": str(error)})

    async def poll(self) -> None:
        """One look at every pod the backend holds."""
        refs = list(await self._provider.list_pods())
        seen: dict[PodRef, PodState | None] = {}
        for ref in refs:
            try:
                state: PodState | None = await self._provider.get_pod_status(ref)
            except NotFoundError:
                state = None
            seen[ref] = state
            if ref not in self._seen or self._seen[ref] != state:
                self._changed(ref)
        for ref in self._seen.keys() - seen.keys():
            self._changed(ref)
        self._seen = seen

    def _changed(self, ref: PodRef) -> None:
        if self._callback is not None:
            self._callback(ref)


def pushing(
    provider: Provider, interval: float, clock: Clock
) -> tuple[PushesStatus, StatusPoller | None]:
    """The backend's own push, or a poller standing in for it (to be `run`)."""
    if isinstance(provider, PushesStatus):
        return provider, None
    poller = StatusPoller(provider, interval, clock)
    return poller, poller
