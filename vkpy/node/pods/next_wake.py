"""What wakes a pod's sync next, read from its record after each sync.

A running pod is synced again at its active deadline, when its projected tokens are
due for renewal and when its volumes are due to be resolved again; each is a timer
of its own in the controller's queue (by reason). All three follow from the pod's
record: a pod in the backend (`Created`) has them as its stage and its object say, a
pod in any other stage has none. `PodLife.sync` returns a `Wake` (these timers, and
whether to sync again at once: a pod the backend lost is created again), and the
pod controller, which owns the queue, applies it; the step that changed the record
never reaches for the queue itself. A time already past arms nothing: the sync that
just ran was that wake-up.
"""

from __future__ import annotations

from dataclasses import dataclass

from vkpy.core.objects import status
from vkpy.node.pods.deadline import deadline_at
from vkpy.node.pods.pod_record import Created, PodRecord
from vkpy.node.pods.pod_status import TERMINAL_PHASES

DEADLINE = "deadline"
RENEWAL = "token-renewal"
VOLUME_SYNC = "volume-sync"
REASONS = (DEADLINE, RENEWAL, VOLUME_SYNC)
SLACK = 0.05
"""Seconds after the due time a timer fires, so the sync finds it due."""


@dataclass(frozen=True, slots=True)
class Wake:
    """When the pod's sync runs next: `timers` gives, for each reason, the seconds
    from now (None: no timer for that reason); `at_once` syncs it again right away."""

    timers: tuple[tuple[str, float | None], ...]
    at_once: bool = False


def timers(record: PodRecord, now: float) -> tuple[tuple[str, float | None], ...]:
    """The pod's timers by reason at `now` (epoch seconds), from its record."""
    stage = record.stage
    if not isinstance(stage, Created):
        return tuple((reason, None) for reason in REASONS)
    pod = record.pod
    deadline = None
    if pod is not None and status(pod).get("phase") not in TERMINAL_PHASES:
        deadline = deadline_at(pod)
    return (
        (DEADLINE, _until(deadline, now)),
        (RENEWAL, _until(stage.token_due, now)),
        (VOLUME_SYNC, _until(stage.volumes_due, now)),
    )


def _until(due: float | None, now: float) -> float | None:
    if due is None:
        return None
    delay = due - now + SLACK
    return delay if delay > 0 else None
