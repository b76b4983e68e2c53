"""Startup, liveness and readiness probes with the kubelet's timing and thresholds.

A probe runs its handler (actions.py) every `periodSeconds` once `initialDelaySeconds`
have passed since the container started, each attempt bounded by `timeoutSeconds`;
its result flips only after `successThreshold` consecutive successes or
`failureThreshold` consecutive failures. Results start as the kubelet's do:
liveness passing, readiness and startup not. Liveness and readiness wait until the
startup probe (if any) has passed; the startup probe then stops. What a result
means (restart the container, mark it ready) is the container's business
(container.py); `ProbeTracker` is pure so the thresholds are tested without time.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Literal

from vkpy.core.objects import KubeObject
from vkpy.providers.process.actions import Outcome

ProbeKind = Literal["startup", "liveness", "readiness"]
HANDLERS = ("exec", "httpGet", "tcpSocket", "grpc")
SPEC_FIELDS: dict[ProbeKind, str] = {
    "startup": "startupProbe",
    "liveness": "livenessProbe",
    "readiness": "readinessProbe",
}


def _number(raw: KubeObject, key: str, default: float, minimum: float) -> float:
    value = raw.get(key)
    if value is None or isinstance(value, bool) or not isinstance(value, int | float):
        return default
    return max(float(value), minimum)


@dataclass(frozen=True)
class ProbeSpec:
    kind: ProbeKind
    handler: KubeObject
    initial_delay: float = 0.0
    period: float = 10.0
    timeout: float = 1.0
    success_threshold: int = 1
    failure_threshold: int = 3
    termination_grace: float | None = None
    """probe-level terminationGracePeriodSeconds (liveness and startup only)."""

    @classmethod
    def parse(cls, kind: ProbeKind, raw: KubeObject) -> ProbeSpec:
        success = int(_number(raw, "successThreshold", 1, 1))
        grace = raw.get("terminationGracePeriodSeconds")
        return cls(
            kind=kind,
            handler={k: v for k, v in raw.items() if k in HANDLERS},
            initial_delay=_number(raw, "initialDelaySeconds", 0, 0),
            period=_number(raw, "periodSeconds", 10, 1),
            timeout=_number(raw, "timeoutSeconds", 1, 1),
            success_threshold=success if kind == "readiness" else 1,
            failure_threshold=int(_number(raw, "failureThreshold", 3, 1)),
            termination_grace=float(grace) if kind != "readiness" and grace is not None else None,
        )


def container_probes(container: KubeObject) -> dict[ProbeKind, ProbeSpec]:
    """The probes a container spec declares."""
    out: dict[ProbeKind, ProbeSpec] = {}
    for kind, key in SPEC_FIELDS.items():
        raw = container.get(key)
        if raw:
            out[kind] = ProbeSpec.parse(kind, raw)
    return out


@dataclass
class ProbeTracker:
    """Consecutive results against the thresholds.

    `result` is the probe's verdict: True passing, False failed, None not known yet
    (a startup probe before it passed or failed). It starts as the kubelet's does:
    liveness passing, readiness failed, startup unknown."""

    spec: ProbeSpec
    result: bool | None = None
    successes: int = 0
    failures: int = 0
    last_message: str = ""

    def __post_init__(self) -> None:
        self.result = {"liveness": True, "readiness": False}.get(self.spec.kind)

    @property
    def passing(self) -> bool:
        return self.result is True

    def record(self, ok: bool, message: str = "") -> bool:
        """Count one attempt; True when the verdict changed."""
        self.last_message = message
        if ok:
            self.successes += 1
            self.failures = 0
            if self.successes >= self.spec.success_threshold and self.result is not True:
                self.result = True
                return True
        else:
            self.failures += 1
            self.successes = 0
            if self.failures >= self.spec.failure_threshold and self.result is not False:
                self.result = False
                return True
        return False


Attempt = Callable[[ProbeSpec], Awaitable[Outcome]]
OnChange = Callable[[ProbeTracker], None]


async def run_probe(
    tracker: ProbeTracker, attempt: Attempt, on_change: OnChange, started: float
) -> None:
    """Probe until cancelled (a startup probe: until it passes).

    `started` is the container's start on the monotonic clock: the initial delay
    counts from there."""
    spec = tracker.spec
    delay = started + spec.initial_delay - time.monotonic()
    if delay > 0:
        await asyncio.sleep(delay)
    while True:
        began = time.monotonic()
        outcome = await attempt(spec)
        if tracker.record(outcome.ok, outcome.message):
            on_change(tracker)
        if spec.kind == "startup" and tracker.passing:
            return
        await asyncio.sleep(max(0.0, spec.period - (time.monotonic() - began)))
