"""Stopping vkpy stops its tasks, however the cancellation lands.

A SIGTERM cancels the node's tasks; a task that swallows its cancellation keeps the
process alive until the test harness (or the Deployment's grace period) kills it.
Two ways a cancellation got lost, both seen in CI as a vkpy that did not stop:
Python 3.11's `asyncio.wait_for` returns the result of work that ended in the same
turn as the cancel (an exec probe's command ending just as the pod's readiness
probing was cancelled: probing went on for ever), and a caller cancelled while it
waits for children it cancelled itself must not take their CancelledError for its
own and carry on.
"""

# ruff: noqa: F811 - pytest fixtures are imported by name and then requested as arguments
from __future__ import annotations

import asyncio
import sys

import pytest

from tests.unit.providers.process.test_process_actions import instance  # noqa: F401 - the fixture
from vkpy.core.cancelling import cancel_and_wait
from vkpy.providers.process import actions as actions_module
from vkpy.providers.process.actions import Actions, Outcome
from vkpy.providers.process.layout import InstanceDir
from vkpy.providers.process.probes import ProbeSpec, ProbeTracker, run_probe

HANG = 5.0
"""A task still running this long after its cancel has swallowed it."""


async def _ends(task: asyncio.Task[object]) -> bool:
    """Whether the task ended (in any way) within HANG seconds."""
    done, _ = await asyncio.wait({task}, timeout=HANG)
    if not done:
        task.cancel()
        await asyncio.wait({task}, timeout=HANG)
    return bool(done)


async def test_readiness_probing_cancelled_as_its_exec_command_ends_stops(
    instance: InstanceDir, monkeypatch: pytest.MonkeyPatch
) -> None:
    actions = Actions(sys.executable, "127.0.0.1")
    real_output = actions_module._capped_output
    probing: list[asyncio.Task[None]] = []
    cancels = 0

    async def output_then_cancel(process: asyncio.subprocess.Process) -> bytes:
        nonlocal cancels
        out = await real_output(process)
        if cancels == 0:  # the pod's deletion cancels probing as `cat` ends
            cancels += 1
            probing[0].cancel()
        return out

    monkeypatch.setattr(actions_module, "_capped_output", output_then_cancel)
    spec = ProbeSpec(kind="readiness", handler={"exec": {"command": ["true"]}}, period=0.01)
    tracker = ProbeTracker(spec)

    async def attempt(spec: ProbeSpec) -> Outcome:
        return await actions.exec(["true"], instance, timeout=10)

    probing.append(asyncio.create_task(run_probe(tracker, attempt, lambda _: None, 0.0)))
    assert await _ends(probing[0]), "readiness probing went on after it was cancelled"
    assert probing[0].cancelled()
    assert cancels == 1


async def _slow_to_stop() -> None:
    try:
        await asyncio.sleep(3600)
    finally:
        await asyncio.sleep(0.05)  # e.g. a container's SIGTERM answered


@pytest.mark.parametrize("children", [1, 3])
async def test_a_caller_cancelled_while_its_children_stop_is_cancelled(children: int) -> None:
    kids = [asyncio.create_task(_slow_to_stop()) for _ in range(children)]
    after: list[str] = []

    async def caller() -> None:
        await cancel_and_wait(*kids)
        after.append("went on")
        await asyncio.sleep(3600)

    task = asyncio.create_task(caller())
    await asyncio.sleep(0.01)
    task.cancel()
    assert await _ends(task)
    assert task.cancelled()
    assert after == []
    await asyncio.wait(kids, timeout=HANG)  # they got their cancel and end by themselves
    assert all(k.cancelled() for k in kids)


async def test_cancel_and_wait_waits_for_the_children_and_logs_their_failures(
    caplog: pytest.LogCaptureFixture,
) -> None:
    async def fails_on_cancel() -> None:
        try:
            await asyncio.sleep(3600)
        finally:
            raise RuntimeError("cleanup failed")

    stopping = asyncio.create_task(_slow_to_stop())
    failing = asyncio.create_task(fails_on_cancel(), name="cleanup")
    finished = asyncio.create_task(asyncio.sleep(0))
    await asyncio.sleep(0.01)
    await cancel_and_wait(stopping, failing, finished, None)
    assert stopping.cancelled() and finished.done() and not finished.cancelled()
    assert isinstance(failing.exception(), RuntimeError)
    [record] = [r for r in caplog.records if r.name == "vkpy.core.cancelling"]
    assert record.getMessage() == "task failed while being stopped"
    assert record.task == "cleanup" and record.exc_info is not None  # type: ignore[attr-defined]


async def test_a_bounded_wait_gives_up_on_a_task_that_ignores_its_cancel(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """The kubelet API's stream calls are stopped with a bound: a backend call that
    swallows its cancel must not hold the connection's cleanup for ever."""
    release = asyncio.Event()

    async def stubborn() -> None:
        while not release.is_set():
            try:
                await release.wait()
            except asyncio.CancelledError:
                continue  # swallowed

    task = asyncio.create_task(stubborn(), name="stubborn call")
    await asyncio.sleep(0)
    waiting = asyncio.create_task(cancel_and_wait(task, timeout=0.05))
    assert await _ends(waiting), "the bounded wait did not give up"
    assert not task.done()
    [record] = [r for r in caplog.records if r.name == "vkpy.core.cancelling"]
    assert record.getMessage() == "task did not finish after cancellation"
    assert record.task == "stubborn call"  # type: ignore[attr-defined]
    release.set()
    await task
