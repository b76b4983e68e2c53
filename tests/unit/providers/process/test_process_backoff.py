"""The kubelet's CrashLoopBackOff schedule, without a clock."""

from vkpy.providers.process.backoff import CrashBackoff, go_duration


def schedule(backoff: CrashBackoff, crashes: int, run_for: float = 1.0) -> list[float]:
    """Waits before each restart when every run crashes after `run_for` seconds."""
    now = 0.0
    waits = []
    for _ in range(crashes):
        now += run_for  # the container runs, then exits
        finished = now
        wait = backoff.wait(finished, now)
        waits.append(wait)
        now += wait
        backoff.restarted(finished, now)
    return waits


def test_first_restart_is_immediate_then_doubling_to_the_cap() -> None:
    waits = schedule(CrashBackoff(), 9)
    assert waits == [0, 10, 20, 40, 80, 160, 300, 300, 300]


def test_waiting_counts_from_the_finish_time() -> None:
    backoff = CrashBackoff()
    backoff.restarted(finished_at=0, now=0)  # first crash: restarted at once
    assert backoff.wait(finished_at=5, now=5) == 10
    assert backoff.wait(finished_at=5, now=12) == 3
    assert backoff.wait(finished_at=5, now=16) == 0
    assert backoff.current(5) == 10


def test_a_long_run_resets_the_backoff() -> None:
    backoff = CrashBackoff()
    assert schedule(backoff, 5)[-1] == 80
    assert backoff.delay == 160
    last = backoff.updated or 0
    finished = last + 601  # ran for over 10 minutes
    assert backoff.wait(finished, finished) == 0
    backoff.restarted(finished, finished)
    assert backoff.delay == 10


def test_configurable_base_for_tests_and_persistence() -> None:
    backoff = CrashBackoff(base=1, cap=4, reset_after=60)
    assert schedule(backoff, 5) == [0, 1, 2, 4, 4]
    copy = CrashBackoff(base=1, cap=4, reset_after=60)
    copy.restore(backoff.to_dict())
    assert (copy.delay, copy.updated) == (backoff.delay, backoff.updated)
    copy.restore("garbage")
    assert copy.delay is None


def test_go_durations() -> None:
    assert [go_duration(s) for s in (1, 10, 80, 300, 3725)] == [
        "1s",
        "10s",
        "1m20s",
        "5m0s",
        "1h2m5s",
    ]
