"""The image pull back-off: 10 s doubling to 5 min, on an injected clock."""

from __future__ import annotations

from tests.unit.fake_clock import FakeClock
from vkpy.oci.images.backoff import PullBackOff


async def test_doubles_from_10s_to_5min() -> None:
    clock = FakeClock()
    backoff = PullBackOff(clock)
    key = PullBackOff.key("uid-1", "busybox")
    delays = []
    for _ in range(8):
        delays.append(backoff.failed(key))
        await clock.advance(backoff.remaining(key))
    assert delays == [10, 20, 40, 80, 160, 300, 300, 300]


async def test_in_backoff_until_the_delay_passes() -> None:
    clock = FakeClock()
    backoff = PullBackOff(clock)
    key = PullBackOff.key("uid-1", "busybox")
    assert not backoff.in_backoff(key)
    backoff.failed(key)
    await clock.advance(9.5)
    assert backoff.in_backoff(key)
    assert backoff.remaining(key) == 0.5
    await clock.advance(0.5)
    assert not backoff.in_backoff(key)
    assert backoff.failed(key) == 20


async def test_keys_are_separate_and_success_or_deletion_forgets() -> None:
    clock = FakeClock()
    backoff = PullBackOff(clock)
    a, b = PullBackOff.key("uid-a", "x"), PullBackOff.key("uid-b", "x")
    backoff.failed(a)
    backoff.failed(a)
    assert backoff.failed(b) == 10
    backoff.succeeded(a)
    assert backoff.failed(a) == 10
    backoff.forget("uid-b")
    assert not backoff.in_backoff(b)


async def test_quiet_for_twice_the_maximum_starts_over() -> None:
    clock = FakeClock()
    backoff = PullBackOff(clock)
    key = PullBackOff.key("uid", "img")
    for _ in range(5):
        backoff.failed(key)
    await clock.advance(601)
    assert backoff.failed(key) == 10
    await clock.advance(601)
    backoff.collect()
    assert backoff.remaining(key) == 0
