"""The image pull back-off: after a failed pull, the kubelet waits 10 s, doubling on
every further failure to at most 5 min, before it tries again (in between, the
container waits with reason `ImagePullBackOff`). Keyed by pod and image, as the
kubelet's `<pod uid>_<image>`; an entry quiet for twice the maximum starts over.
Pure logic on an injected clock.
"""

from __future__ import annotations

from dataclasses import dataclass

from vkpy.core.clock import Clock

INITIAL = 10.0
MAXIMUM = 300.0


@dataclass
class _Entry:
    delay: float
    last_failure: float


class PullBackOff:
    def __init__(self, clock: Clock, initial: float = INITIAL, maximum: float = MAXIMUM) -> None:
        self._clock = clock
        self._initial = initial
        self._maximum = maximum
        self._entries: dict[str, _Entry] = {}

    @staticmethod
    def key(pod_uid: str, image: str) -> str:
        return f"{pod_uid}_{image}"

    def failed(self, key: str) -> float:
        """A pull failed now: the delay before the next try (10, 20, 40, ... 300 s)."""
        now = self._clock.monotonic()
        entry = self._entries.get(key)
        if entry is None or now - entry.last_failure > 2 * self._maximum:
            entry = _Entry(self._initial, now)
        else:
            entry = _Entry(min(entry.delay * 2, self._maximum), now)
        self._entries[key] = entry
        return entry.delay

    def remaining(self, key: str) -> float:
        """Seconds until a pull may be tried again; 0 when it may now."""
        entry = self._entries.get(key)
        if entry is None:
            return 0.0
        return max(0.0, entry.last_failure + entry.delay - self._clock.monotonic())

    def in_backoff(self, key: str) -> bool:
        """True while the container should wait with `ImagePullBackOff`."""
        return self.remaining(key) > 0

    def succeeded(self, key: str) -> None:
        self._entries.pop(key, None)

    def forget(self, pod_uid: str) -> None:
        """Drop a deleted pod's entries."""
        prefix = f"{pod_uid}_"
        for key in [k for k in self._entries if k.startswith(prefix)]:
            del self._entries[key]

    def collect(self) -> None:
        """Drop entries quiet for twice the maximum (they would start over anyway)."""
        now = self._clock.monotonic()
        for key in [
            k for k, e in self._entries.items() if now - e.last_failure > 2 * self._maximum
        ]:
            del self._entries[key]
