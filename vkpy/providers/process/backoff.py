"""The kubelet's CrashLoopBackOff, as a small pure object.

The kubelet keeps one backoff entry per container (client-go's flowcontrol.Backoff,
10 s initial, 5 min cap, no jitter here): when a container exits, it may restart at
once if it is not "in backoff since" its finish time; otherwise it waits until the
finish time plus the current delay, then doubles the delay. The first crash
restarts immediately, later ones wait 10 s, 20 s, 40 s, ... up to 5 min. An entry
is forgotten when the container ran longer than the reset period (the kubelet: twice
the cap, 10 min) between two restarts. Times are plain seconds so tests need no
clock.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass
class CrashBackoff:
    base: float = 10.0
    cap: float = 300.0
    reset_after: float = 600.0
    delay: float | None = None
    """The current delay; None: no entry (next restart is immediate)."""
    updated: float | None = None
    """When the delay was last advanced (the last restart)."""

    def _expired(self, finished_at: float) -> bool:
        return self.updated is None or finished_at - self.updated > self.reset_after

    def wait(self, finished_at: float, now: float) -> float:
        """Seconds still to wait before restarting a container that finished at
        `finished_at` (0: restart now)."""
        if self.delay is None or self._expired(finished_at):
            return 0.0
        return max(0.0, finished_at + self.delay - now)

    def current(self, finished_at: float) -> float:
        """The delay that applies to a container that finished at `finished_at`."""
        if self.delay is None or self._expired(finished_at):
            return 0.0
        return self.delay

    def restarted(self, finished_at: float, now: float) -> None:
        """Record a restart (flowcontrol's Next): start at `base` or double the delay."""
        if self.delay is None or self._expired(finished_at):
            self.delay = self.base
        else:
            self.delay = min(self.delay * 2, self.cap)
        self.updated = now

    def to_dict(self) -> dict[str, float | None]:
        return {"delay": self.delay, "updated": self.updated}

    def restore(self, raw: object) -> None:
        """Take back what `to_dict` saved (anything else: no entry)."""
        delay = raw.get("delay") if isinstance(raw, dict) else None
        updated = raw.get("updated") if isinstance(raw, dict) else None
        self.delay = float(delay) if isinstance(delay, int | float) else None
        self.updated = float(updated) if isinstance(updated, int | float) else None


def go_duration(seconds: float) -> str:
    """A duration as Go prints it in kubelet messages: 10s, 1m20s, 5m0s."""
    whole = round(seconds)
    if whole < 60:
        return f"{whole}s"
    minutes, rest = divmod(whole, 60)
    if minutes < 60:
        return f"{minutes}m{rest}s"
    hours, minutes = divmod(minutes, 60)
    return f"{hours}h{minutes}m{rest}s"
