"""Ephemeral containers (`kubectl debug`) on the process backend, with real processes.

One targeting a container runs in that container's context (its environment and its
root, with its mounts), runs once, is reported in the pod's state, and its output
is in its log; one the backend cannot run is refused before anything starts; a new
provider finds it again after a restart of vkpy.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from tests.unit.providers.process.test_process_provider import (
    MOUNT,
    OUT,
    REF,
    container,
    make,
    pod,
    until,
)
from vkpy.providers.base import ContainerConfig, LogQuery, PodState
from vkpy.providers.errors import InvalidInputError
from vkpy.providers.process.provider import ProcessProvider


def debug(
    name: str, script: str | None, target: str | None = "app", image: str = "busybox"
) -> ContainerConfig:
    spec = {"name": name, "image": image}
    if target:
        spec["targetContainerName"] = target
    command = ("sh", "-c", script) if script is not None else ()
    return ContainerConfig(name, image, command, (), env=(("OWN", "mine"),), spec=spec)


def ephemeral(state: PodState, name: str) -> str:
    return next((c.state for c in state.ephemeral_containers if c.name == name), "")


async def test_a_debug_container_runs_once_in_its_targets_context(tmp_path: Path) -> None:
    provider = make(tmp_path)
    await provider.start()
    try:
        app = container("app", "echo data > out/file; sleep 60", **MOUNT)
        app = ContainerConfig(
            app.name, app.image, app.command, (), env=(("GREETING", "hi"),), spec=app.spec
        )
        await provider.create_pod(pod(app, volumes=(OUT,)))
        await until(provider, lambda s: s.phase == "Running")
        script = 'echo "$GREETING $OWN $(cat out/file)"; exit 3'
        await provider.run_ephemeral_containers(REF, [debug("dbg", script)])
        await provider.run_ephemeral_containers(REF, [debug("dbg", script)])  # again: no-op
        state = await until(provider, lambda s: ephemeral(s, "dbg") == "terminated")
        (dbg,) = state.ephemeral_containers
        assert dbg.exit_code == 3 and dbg.restart_count == 0
        assert state.phase == "Running" and state.containers[0].state == "running"
        records = [r.data async for r in provider.container_logs(REF, LogQuery("dbg"))]
        assert records == [b"hi mine data\n"]
        await provider.close()
        await asyncio.sleep(0.2)
        again = make(tmp_path)
        await again.start()
        provider = again
        state = await until(provider, lambda s: ephemeral(s, "dbg") == "terminated")
        assert state.ephemeral_containers[0].exit_code == 3
    finally:
        await provider.delete_pod(REF, 0)
        await provider.close()


async def test_debug_containers_that_cannot_run_are_refused(tmp_path: Path) -> None:
    provider: ProcessProvider = make(tmp_path)
    await provider.start()
    try:
        await provider.create_pod(pod(container("app", "sleep 60")))
        await until(provider, lambda s: s.phase == "Running")
        with pytest.raises(InvalidInputError, match="has no command"):
            unknown = debug("shell", None, image="example.com/team/tools:1")
            await provider.run_ephemeral_containers(REF, [unknown])
        with pytest.raises(InvalidInputError, match='target container "web"'):
            await provider.run_ephemeral_containers(REF, [debug("dbg", "true", target="web")])
        untargeted = debug("solo", "pwd", target=None)
        await provider.run_ephemeral_containers(REF, [untargeted])
        state = await until(provider, lambda s: ephemeral(s, "solo") == "terminated")
        assert [c.name for c in state.ephemeral_containers] == ["solo"]
        (line,) = [r.data async for r in provider.container_logs(REF, LogQuery("solo"))]
        assert line.decode().rstrip().endswith("/containers/solo/root")
    finally:
        await provider.delete_pod(REF, 0)
        await provider.close()
