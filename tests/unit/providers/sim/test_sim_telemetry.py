"""The sim backend's synthetic logs and usage: predictable to the byte."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime
from typing import Any

import pytest

from tests.unit.fake_clock import FakeClock
from vkpy.providers.base import (
    ContainerConfig,
    LogQuery,
    LogsProvider,
    PodConfig,
    PodRef,
    StatsProvider,
)
from vkpy.providers.errors import NotFoundError
from vkpy.providers.sim import SimConfig, SimProvider
from vkpy.providers.sim.telemetry import (
    STARTUP_CPU_SECONDS,
    LogShape,
    Run,
    line,
    records,
    usage,
    written,
)


def test_lines_and_streams_are_a_function_of_the_index() -> None:
    run = Run(start=100.0, end=None, restart=2)
    assert line("app", run, 0, LogShape()) == b"line 0 of app (run 2) on stdout\n"
    assert line("app", run, 4, LogShape()) == b"line 4 of app (run 2) on stderr\n"
    padded = line("app", run, 7, LogShape(width=64))
    assert len(padded) == 64
    assert padded.endswith(b"...\n")


def test_lines_written_follow_the_clock_and_stop_at_the_end() -> None:
    run = Run(start=100.0, end=110.0, restart=0)
    assert written(run, 99.0, LogShape()) == 0
    assert written(run, 100.0, LogShape()) == 1
    assert written(run, 103.5, LogShape()) == 4
    assert written(run, 500.0, LogShape()) == 11
    assert written(run, 101.0, LogShape(rate=10)) == 11


def test_tail_since_and_streams() -> None:
    run = Run(start=100.0, end=None, restart=0)
    shape = LogShape()
    since = datetime.fromtimestamp(105.5, UTC)

    def indexes(query: LogQuery) -> list[int]:
        got, _ = records("app", run, shape, query, now=110.0)
        return [int(r.data.split()[1]) for r in got]

    assert indexes(LogQuery("app")) == list(range(11))
    assert indexes(LogQuery("app", tail_lines=3)) == [8, 9, 10]
    assert indexes(LogQuery("app", since=since)) == [6, 7, 8, 9, 10]
    assert indexes(LogQuery("app", since=since, tail_lines=10)) == [6, 7, 8, 9, 10]
    assert indexes(LogQuery("app", streams=frozenset({"stderr"}))) == [4, 9]
    got, following = records("app", run, shape, LogQuery("app", tail_lines=0), now=110.0)
    assert list(got) == []
    assert following == 11
    first, _ = records("app", run, shape, LogQuery("app"), now=110.0)
    assert next(first).time == datetime.fromtimestamp(100.0, UTC)


def test_cpu_grows_and_memory_is_constant() -> None:
    run = Run(start=100.0, end=None, restart=0)
    early, late = usage("app", run, 101.0, 0.5, 1000), usage("app", run, 111.0, 0.5, 1000)
    assert early.cpu_usage_core_seconds == pytest.approx(0.51)
    assert late.cpu_usage_core_seconds == pytest.approx(5.51)
    assert early.memory_working_set_bytes == late.memory_working_set_bytes == 1000


def pod_config(annotations: dict[str, str], resources: dict[str, Any] | None = None) -> PodConfig:
    pod = {
        "metadata": {"name": "p", "namespace": "ns", "uid": "u1", "annotations": annotations},
        "spec": {"restartPolicy": "Always"},
    }
    spec = {"name": "app", "image": "i", "resources": resources or {}}
    return PodConfig(
        ref=PodRef("ns", "p", "u1"),
        pod=pod,
        init_containers=(),
        containers=(ContainerConfig("app", "i", (), (), spec=spec),),
    )


async def collect(provider: SimProvider, query: LogQuery) -> list[bytes]:
    return [r.data async for r in provider.container_logs(PodRef("ns", "p", "u1"), query)]


async def test_sim_provider_serves_logs_and_stats() -> None:
    clock = FakeClock()
    provider = SimProvider(SimConfig(), clock)
    assert isinstance(provider, LogsProvider)
    assert isinstance(provider, StatsProvider)
    await provider.create_pod(
        pod_config(
            {"sim.vkpy.io/log-lines-per-second": "20"},
            {"requests": {"cpu": "250m", "memory": "64Mi"}},
        )
    )
    await clock.advance(0.2)
    lines = await collect(provider, LogQuery("app"))
    assert lines[0] == b"line 0 of app (run 0) on stdout\n"
    assert len(lines) == 5  # at 0, 0.05, ... 0.2 s
    (stats,) = await provider.pod_stats()
    (app,) = stats.containers
    assert app.memory_working_set_bytes == 64 * 2**20
    assert app.cpu_usage_core_seconds == pytest.approx(STARTUP_CPU_SECONDS + 0.2 * 0.25)
    with pytest.raises(NotFoundError, match="previous terminated container"):
        await collect(provider, LogQuery("app", previous=True))
    with pytest.raises(NotFoundError, match="not available"):
        await collect(provider, LogQuery("nope"))
    await provider.close()


async def test_follow_prints_on_the_clock_until_the_run_ends() -> None:
    clock = FakeClock()
    provider = SimProvider(SimConfig(restart_delay=5), clock)
    await provider.create_pod(
        pod_config({"sim.vkpy.io/log-lines-per-second": "10", "sim.vkpy.io/run-seconds": "0.55"})
    )
    started = clock.time()
    follow = asyncio.create_task(collect(provider, LogQuery("app", follow=True)))
    await clock.advance(0.5)
    assert not follow.done()
    await clock.advance(0.1)
    lines = await follow
    took = clock.time() - started
    assert [int(raw.split()[1]) for raw in lines] == list(range(6))
    assert took == pytest.approx(0.6)
    # waiting to restart: the run that ended is both the current and the previous logs
    assert await collect(provider, LogQuery("app", previous=True)) == lines
    assert await collect(provider, LogQuery("app")) == lines
    await provider.close()
