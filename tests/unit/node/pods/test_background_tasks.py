"""A backend's long-lived tasks run supervised (issue 11, defect 8).

The Fargate status monitor used to be a bare `create_task` that ended silently on
any error but ProviderError, after which no status was pushed while the node stayed
Ready. Backends now declare such tasks; the supervisor restarts them with back-off,
logs them by name, and while they keep failing the node reports Ready=False with
the task's error. Time is injected: back-offs are recorded, never slept.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import pytest

from tests.unit.node.heartbeat.test_node_adoption import Backend, FakeApi
from vkpy.kube.events import EventRecorder
from vkpy.node.background import TaskSupervisor
from vkpy.node.heartbeat.node_controller import NodeController
from vkpy.node.settings import NodeSettings
from vkpy.providers.base import BackgroundTask, RunsTasks
from vkpy.providers.fargate import FargateConfig, FargateProvider


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0
        self.delays: list[float] = []

    def monotonic(self) -> float:
        return self.now

    async def sleep(self, delay: float) -> None:
        self.delays.append(delay)
        self.now += delay
        await asyncio.sleep(0)


async def run_until(supervisor: TaskSupervisor, done: asyncio.Event) -> None:
    runner = asyncio.create_task(supervisor.run())
    async with asyncio.timeout(5):
        await done.wait()
    runner.cancel()
    with pytest.raises(asyncio.CancelledError):
        await runner


async def test_a_task_that_fails_or_ends_is_restarted_with_growing_back_off(
    caplog: pytest.LogCaptureFixture,
) -> None:
    clock = Clock()
    supervisor = TaskSupervisor(clock=clock)
    runs = 0
    done = asyncio.Event()

    async def monitor() -> None:
        nonlocal runs
        runs += 1
        if runs == 1:
            raise KeyError("an answer without the expected field")
        if runs < 4:
            return
        done.set()
        await asyncio.Event().wait()

    supervisor.add(BackgroundTask("status-monitor", monitor))
    with caplog.at_level(logging.DEBUG):
        await run_until(supervisor, done)
    assert runs == 4
    assert clock.delays == [1.0, 2.0, 4.0]
    failed = [r for r in caplog.records if r.getMessage() == "background task failed"]
    assert failed and failed[0].task == "status-monitor"  # type: ignore[attr-defined]
    assert failed[0].exc_info is not None
    assert any(r.getMessage() == "background task ended unexpectedly" for r in caplog.records)


async def test_repeated_failures_make_the_node_unhealthy_until_the_task_runs_again() -> None:
    clock = Clock()
    supervisor = TaskSupervisor(clock=clock, stable_after=60)
    runs = 0
    done = asyncio.Event()

    async def monitor() -> None:
        nonlocal runs
        runs += 1
        if runs <= 3:
            raise RuntimeError(f"boom {runs}")
        done.set()
        await asyncio.Event().wait()

    supervisor.add(BackgroundTask("status-monitor", monitor))
    await run_until(supervisor, done)
    assert supervisor.problem() == "backend task status-monitor failed: RuntimeError: boom 3"
    clock.now += 59
    assert supervisor.problem() is not None
    clock.now += 1
    assert supervisor.problem() is None


async def test_a_critical_task_fails_the_node_at_once() -> None:
    clock = Clock()
    supervisor = TaskSupervisor(clock=clock)
    failed = asyncio.Event()

    async def watcher() -> None:
        if not failed.is_set():
            failed.set()
            raise RuntimeError("lost the event stream")
        await asyncio.Event().wait()

    supervisor.add(BackgroundTask("events", watcher, critical=True))
    await run_until(supervisor, failed)
    assert supervisor.problem() == "backend task events failed: RuntimeError: lost the event stream"


async def test_the_node_reports_not_ready_with_the_tasks_error() -> None:
    supervisor = TaskSupervisor()
    supervisor.add(BackgroundTask("fargate-monitor", asyncio.Event().wait, critical=True))
    api = FakeApi({("PATCH", "/api/v1/nodes/vk/status"): [{"status": {}}]})
    events = EventRecorder(api, host="vk")  # type: ignore[arg-type]
    controller = NodeController(
        api,  # type: ignore[arg-type]
        Backend(),  # type: ignore[arg-type]
        events,
        NodeSettings(name="vk", internal_ip="127.0.0.1"),
        task_problem=lambda: "backend task fargate-monitor failed: TypeError: oops",
    )
    await controller.sync(force=True)
    (body,) = [b for m, p, b in api.calls if p.endswith("/status")]
    ready = next(c for c in body["status"]["conditions"] if c["type"] == "Ready")
    assert (ready["status"], ready["reason"]) == ("False", "BackendTaskFailed")
    assert ready["message"] == "fake: backend task fargate-monitor failed: TypeError: oops"


async def test_the_fargate_monitor_is_declared_not_started_bare() -> None:
    config: dict[str, Any] = {
        "region": "us-east-1",
        "endpoint_url": "http://127.0.0.1:9",  # never called: nothing is asked of AWS
        "cluster": "c",
        "subnets": ["subnet-1"],
        "execution_role_arn": "arn:aws:iam::123456789012:role/x",
    }
    provider = FargateProvider(FargateConfig.from_dict(config), "vk")
    before = asyncio.all_tasks()
    await provider.start()
    try:
        assert asyncio.all_tasks() == before, "start() left a task of its own running"
        assert isinstance(provider, RunsTasks)
        assert [t.name for t in provider.background_tasks()] == ["fargate-monitor"]
    finally:
        await provider.close()
