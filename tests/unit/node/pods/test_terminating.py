"""While a pod is being stopped, its status keeps being reported (readiness still
changes during a graceful termination, as with the kubelet)."""

import asyncio

import pytest

from tests.unit.fake_clock import FakeClock, settle
from vkpy.node.pods.terminating import stop_reporting


async def test_reports_every_interval_until_the_stop_is_done() -> None:
    clock = FakeClock()
    stopped = asyncio.Event()
    reports: list[float] = []

    async def stop() -> None:
        await stopped.wait()

    async def report() -> None:
        reports.append(clock.time())

    task = asyncio.create_task(stop_reporting(stop(), report, clock, interval=1.0))
    await settle()
    for _ in range(3):
        await clock.advance(1.0)
    assert len(reports) == 3
    stopped.set()
    await settle()
    assert task.done()
    await clock.advance(5.0)
    assert len(reports) == 3


async def test_a_failing_report_does_not_stop_the_wait_and_stop_errors_are_raised() -> None:
    clock = FakeClock()
    finish = asyncio.Event()

    async def stop() -> None:
        await finish.wait()
        raise RuntimeError("backend failed")

    async def report() -> None:
        raise ValueError("API down")

    task = asyncio.create_task(stop_reporting(stop(), report, clock, interval=1.0))
    await settle()
    await clock.advance(2.0)
    assert not task.done()
    finish.set()
    with pytest.raises(RuntimeError, match="backend failed"):
        await task
