"""The process backend on its own (no API server): hooks, sidecars, adoption by a new
provider, volume refresh, log follow, stats and image updates, with real processes."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import pytest

from vkpy.providers.base import (
    ContainerConfig,
    LogQuery,
    PodConfig,
    PodRef,
    PodState,
    VolumeConfig,
    VolumeFile,
)
from vkpy.providers.errors import NotFoundError
from vkpy.providers.process.config import ProcessConfig
from vkpy.providers.process.provider import ProcessProvider

REF = PodRef("ns", "web", "uid-1")


def container(name: str, script: str, **spec: Any) -> ContainerConfig:
    return ContainerConfig(name, "busybox", ("sh", "-c", script), (), spec=spec)


def pod(
    *containers: ContainerConfig,
    inits: tuple[ContainerConfig, ...] = (),
    volumes: tuple[VolumeConfig, ...] = (),
    policy: str = "Never",
) -> PodConfig:
    spec = {"restartPolicy": policy, "terminationGracePeriodSeconds": 5}
    return PodConfig(REF, {"spec": spec}, inits, containers, volumes)


OUT = VolumeConfig("out", "emptyDir")
MOUNT = {"volumeMounts": [{"name": "out", "mountPath": "/out"}]}


@pytest.fixture
async def provider(tmp_path: Path) -> AsyncIterator[ProcessProvider]:
    backend = make(tmp_path)
    await backend.start()
    yield backend
    for ref in await backend.list_pods():
        await backend.delete_pod(ref, 0)
    await backend.close()


def make(tmp_path: Path) -> ProcessProvider:
    config = ProcessConfig.from_dict(
        # Host programs (the stand-ins), the mode these tests are written for.
        {"runtime": "host", "backoff_base_seconds": 0.2, "backoff_max_seconds": 1},
        state_dir=str(tmp_path),
        internal_ip="127.0.0.1",
    )
    return ProcessProvider(config)


async def until(
    backend: ProcessProvider, check: Callable[[PodState], bool], timeout: float = 20
) -> PodState:
    deadline = time.monotonic() + timeout
    while True:
        state = await backend.get_pod_status(REF)
        if check(state):
            return state
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out; last state: {state}")
        await asyncio.sleep(0.05)


def out(tmp_path: Path) -> Path:
    return tmp_path / "process/pods" / REF.uid / "volumes/out"


async def test_hooks_run_around_the_container(provider: ProcessProvider, tmp_path: Path) -> None:
    lifecycle = {
        "postStart": {"exec": {"command": ["sh", "-c", "echo started > out/post"]}},
        "preStop": {"exec": {"command": ["sh", "-c", "echo stopping > out/pre"]}},
    }
    app = container("app", "trap 'echo term > out/term; exit 0' TERM; while :; do sleep 0.1; done",
                    lifecycle=lifecycle, **MOUNT)  # fmt: skip
    await provider.create_pod(pod(app, volumes=(OUT,)))
    await until(provider, lambda s: s.phase == "Running")
    directory = out(tmp_path)
    post = directory / "post"
    for _ in range(400):  # the hook's shell makes the file before it writes it
        if post.exists() and post.read_text():
            break
        await asyncio.sleep(0.05)
    assert post.read_text() == "started\n"
    runtime = provider._pods[REF.uid]
    began = time.monotonic()
    await runtime.stop(5)
    assert time.monotonic() - began < 4
    assert (directory / "pre").read_text() == "stopping\n"
    assert (directory / "term").read_text() == "term\n"
    state = runtime.state()
    assert state.containers[0].state == "terminated"
    assert state.containers[0].exit_code == 0


async def test_a_failing_post_start_hook_restarts_the_container(
    provider: ProcessProvider,
) -> None:
    lifecycle = {"postStart": {"exec": {"command": ["false"]}}}
    await provider.create_pod(
        pod(container("app", "sleep 60", lifecycle=lifecycle), policy="Always")
    )
    state = await until(provider, lambda s: s.containers[0].restart_count >= 1)
    last = state.containers[0].last_terminated
    assert last is not None and last.exit_code in (137, 143)


async def test_sidecars_start_before_apps_and_stop_after_them(
    provider: ProcessProvider, tmp_path: Path
) -> None:
    sidecar = ContainerConfig(
        "proxy",
        "busybox",
        ("sh", "-c", "echo proxy >> out/order; exec sleep 60"),
        (),
        spec={"restartPolicy": "Always", **MOUNT},
    )
    init = container("setup", "echo setup >> out/order", **MOUNT)
    app = container("app", "echo app >> out/order; sleep 0.5", **MOUNT)
    await provider.create_pod(pod(app, inits=(sidecar, init), volumes=(OUT,)))
    state = await until(
        provider, lambda s: s.phase == "Succeeded" and s.init_containers[0].state != "running"
    )
    assert (out(tmp_path) / "order").read_text() == "proxy\nsetup\napp\n"
    proxy = state.init_containers[0]
    assert proxy.state == "terminated"
    assert proxy.exit_code == 143  # stopped with SIGTERM once the app was done


async def test_a_new_provider_adopts_running_and_ended_containers(tmp_path: Path) -> None:
    first = make(tmp_path)
    await first.start()
    await first.create_pod(
        pod(container("keeper", "sleep 60"), container("quitter", "sleep 0.5; exit 4"))
    )
    running = await until(first, lambda s: all(c.state == "running" for c in s.containers))
    await first.close()
    await asyncio.sleep(1)
    second = make(tmp_path)
    await second.start()
    try:
        assert await second.list_pods() == [REF]
        state = await until(second, lambda s: s.containers[1].state == "terminated")
        assert state.containers[0].container_id == running.containers[0].container_id
        assert state.containers[0].started_at == running.containers[0].started_at
        assert state.containers[1].exit_code == 4
        assert state.phase == "Running"
    finally:
        await second.delete_pod(REF, 1)
        await second.close()
    assert not (tmp_path / "process/pods" / REF.uid).exists()


async def test_refreshed_volumes_are_seen_by_the_container(
    provider: ProcessProvider, tmp_path: Path
) -> None:
    token = VolumeConfig("token", "projected", files=(VolumeFile("token", b"first"),))
    mounts = {"volumeMounts": [{"name": "token", "mountPath": "/var/run/token"}]}
    config = pod(container("app", "sleep 60", **mounts), volumes=(token,))
    await provider.create_pod(config)
    await until(provider, lambda s: s.phase == "Running")
    root = tmp_path / "process/pods" / REF.uid / "containers/app/root"
    assert (root / "var/run/token/token").read_bytes() == b"first"
    renewed = VolumeConfig("token", "projected", files=(VolumeFile("token", b"second"),))
    await provider.refresh_volumes(PodConfig(REF, config.pod, (), config.containers, (renewed,)))
    assert (root / "var/run/token/token").read_bytes() == b"second"


async def test_logs_follow_until_the_container_ends(provider: ProcessProvider) -> None:
    script = "for n in 1 2 3; do echo out $n; echo err $n >&2; sleep 0.3; done"
    await provider.create_pod(pod(container("app", script)))
    await until(provider, lambda s: s.phase in ("Running", "Succeeded"))
    records = [
        r async for r in provider.container_logs(REF, LogQuery(container="app", follow=True))
    ]
    assert [(r.stream, r.data) for r in records if r.stream == "stdout"] == [
        ("stdout", b"out 1\n"),
        ("stdout", b"out 2\n"),
        ("stdout", b"out 3\n"),
    ]
    errors = LogQuery(container="app", streams=frozenset({"stderr"}), tail_lines=1)
    assert [r.data async for r in provider.container_logs(REF, errors)] == [b"err 3\n"]
    with pytest.raises(NotFoundError, match="previous terminated container"):
        _ = [r async for r in provider.container_logs(REF, LogQuery("app", previous=True))]
    with pytest.raises(NotFoundError):
        _ = [r async for r in provider.container_logs(REF, LogQuery("nope"))]


async def test_stats_of_a_busy_container(provider: ProcessProvider) -> None:
    await provider.create_pod(pod(container("spin", "while :; do :; done")))
    await until(provider, lambda s: s.phase == "Running")
    await asyncio.sleep(0.5)
    (first,) = await provider.pod_stats()
    await asyncio.sleep(0.3)
    (second,) = await provider.pod_stats()
    assert first.ref == REF
    (spin,) = second.containers
    assert spin.name == "spin"
    assert spin.cpu_usage_core_seconds > first.containers[0].cpu_usage_core_seconds > 0
    assert spin.memory_working_set_bytes > 0


async def test_stats_of_an_idle_container_are_not_zero(provider: ProcessProvider) -> None:
    # Starting `sleep` costs a few ms, less than a 10 ms clock tick of /proc/<pid>/stat.
    await provider.create_pod(pod(container("nap", "exec sleep 60")))
    await until(provider, lambda s: s.phase == "Running")
    await asyncio.sleep(0.2)
    (first,) = await provider.pod_stats()
    (nap,) = first.containers
    assert 0 < nap.cpu_usage_core_seconds < 0.5
    (second,) = await provider.pod_stats()
    assert second.containers[0].cpu_usage_core_seconds >= nap.cpu_usage_core_seconds


async def test_an_image_change_restarts_the_container(provider: ProcessProvider) -> None:
    config = pod(container("app", "sleep 60"), policy="Never")
    await provider.create_pod(config)
    before = await until(provider, lambda s: s.phase == "Running")
    app = config.containers[0]
    changed = ContainerConfig(app.name, "busybox:2", app.command, app.args, spec=app.spec)
    await provider.update_pod(PodConfig(REF, config.pod, (), (changed,), ()))
    after = await until(
        provider,
        lambda s: s.containers[0].restart_count == 1 and s.containers[0].state == "running",
    )
    assert after.containers[0].image == "busybox:2"
    assert after.containers[0].container_id != before.containers[0].container_id


def test_config_errors(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="unknown process settings: colour"):
        ProcessConfig.from_dict({"colour": 1}, state_dir="/tmp", internal_ip="h")
    with pytest.raises(ValueError, match="must not be root"):
        ProcessConfig.from_dict({"run_as": "root"}, state_dir="/tmp", internal_ip="h")
    with pytest.raises(ValueError, match="memory_enforcement"):
        ProcessConfig.from_dict({"memory_enforcement": "hope"}, state_dir="/tmp", internal_ip="h")
    with pytest.raises(ValueError, match="capacity cpu"):
        ProcessConfig.from_dict({"capacity": {"cpu": "many"}}, state_dir="/tmp", internal_ip="h")
    config = ProcessConfig.from_dict(
        {"capacity": {"pods": 20}, "host_path_prefixes": ["/srv/"]},
        state_dir="/tmp",
        internal_ip="h",
    )
    assert config.host_path_prefixes == ("/srv",)
    assert config.node_capacity()["pods"] == "20"
    assert int(config.node_capacity()["cpu"]) >= 1
