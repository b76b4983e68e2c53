"""What wakes a pod next follows from its record (next_wake), and the controller's
queue arms exactly that: a timer per reason, moved or cancelled, never doubled."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest

from tests.unit.fake_clock import FakeClock
from vkpy.node.pods.keyed_queue import KeyedQueue
from vkpy.node.pods.next_wake import DEADLINE, RENEWAL, VOLUME_SYNC, timers
from vkpy.node.pods.pod_record import Absent, Created, Deleted, Final, PodRecord, Stopping
from vkpy.node.pods.pod_status import timestamp
from vkpy.providers.base import PodRef, PodState

NOW = 1_800_000_000.0
STARTED = timestamp(datetime.fromtimestamp(NOW, UTC))


def pod(phase: str = "Running", deadline: int | None = 60) -> dict[str, Any]:
    spec: dict[str, Any] = {"containers": [{"name": "c", "image": "i"}]}
    if deadline is not None:
        spec["activeDeadlineSeconds"] = deadline
    return {
        "metadata": {"name": "p", "namespace": "ns", "uid": "u"},
        "spec": spec,
        "status": {"phase": phase, "startTime": STARTED},
    }


def record(stage: Any, obj: dict[str, Any] | None = None) -> PodRecord:
    return PodRecord(ref=PodRef("ns", "p", "u"), pod=obj if obj is not None else pod(), stage=stage)


def test_a_pod_in_the_backend_is_woken_at_its_deadline_renewal_and_volume_sync() -> None:
    due = dict(timers(record(Created(token_due=NOW + 100, volumes_due=NOW + 30)), NOW + 10))
    assert due[DEADLINE] == pytest.approx(50.05)  # 60 s from startTime, 10 s gone
    assert due[RENEWAL] == pytest.approx(90.05)
    assert due[VOLUME_SYNC] == pytest.approx(20.05)


def test_nothing_wakes_a_pod_for_what_it_does_not_have() -> None:
    due = dict(timers(record(Created(), pod(deadline=None)), NOW))
    assert due == {DEADLINE: None, RENEWAL: None, VOLUME_SYNC: None}


def test_a_time_already_past_arms_nothing() -> None:
    """The sync that just ran was that wake-up: arming it again would spin."""
    due = dict(timers(record(Created(token_due=NOW - 1, volumes_due=NOW)), NOW + 61))
    assert due == {DEADLINE: None, RENEWAL: None, VOLUME_SYNC: None}


def test_a_terminal_pod_has_no_deadline() -> None:
    due = dict(timers(record(Created(token_due=NOW + 100), pod(phase="Succeeded")), NOW))
    assert due[DEADLINE] is None
    assert due[RENEWAL] == pytest.approx(100.05)


@pytest.mark.parametrize(
    "stage", [Absent(), Stopping(), Final(PodState(phase="Failed")), Deleted()]
)
def test_a_pod_not_in_the_backend_has_no_timer(stage: Any) -> None:
    assert set(dict(timers(record(stage), NOW)).values()) == {None}


async def test_the_queue_moves_keeps_or_cancels_a_timer_by_reason() -> None:
    clock = FakeClock()

    async def handler(key: str) -> None:
        pass

    queue = KeyedQueue(handler, workers=1, clock=clock)
    queue.schedule("k", RENEWAL, 10)
    queue.schedule("k", DEADLINE, 30)
    assert len(clock.pending()) == 2
    queue.schedule("k", RENEWAL, 10)  # the same moment: the armed timer is kept
    assert len(clock.pending()) == 2
    queue.schedule("k", RENEWAL, 20)  # moved
    assert queue.due_in("k", RENEWAL) == pytest.approx(20)
    assert clock.pending() == [20, 30]
    queue.schedule("k", DEADLINE, None)  # cancelled
    assert queue.due_in("k", DEADLINE) is None
    assert clock.pending() == [20]
