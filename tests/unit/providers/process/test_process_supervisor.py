"""The per-container supervisor as real processes: exit records, signals, logs,
memory limits, and finding a supervisor again by pid and start time."""

from __future__ import annotations

import asyncio
import dataclasses
import os
import signal
import sys
from pathlib import Path

import pytest

from vkpy.providers.process import cgroups
from vkpy.providers.process.layout import InstanceDir, read_json
from vkpy.providers.process.logfile import parse_record
from vkpy.providers.process.proc import session_members
from vkpy.providers.process.records import (
    STDIN_FIFO,
    ExitRecord,
    LaunchSpec,
    MemoryMode,
    ProcessContext,
    RunRecord,
)
from vkpy.providers.process.supervision import SIGNAL_KILL, Supervised, collect, launch


def spec(
    tmp_path: Path,
    script: str,
    *,
    memory: int | None = None,
    mode: MemoryMode = "none",
    parent: str | None = None,
) -> LaunchSpec:
    instance = tmp_path / "instance"
    instance.mkdir(exist_ok=True)
    return LaunchSpec(
        argv=("sh", "-c", script),
        context=ProcessContext(
            env=(("PATH", "/usr/bin:/bin"), ("GREETING", "hi")), cwd=str(tmp_path)
        ),
        instance_dir=str(instance),
        log_max_bytes=1 << 20,
        log_max_files=2,
        memory_limit=memory,
        memory_mode=mode,
        cgroup_parent=parent,
        cgroup_name=f"test-{os.getpid()}",
        watchdog_interval=0.05,
    )


async def run_to_end(launch_spec: LaunchSpec) -> ExitRecord:
    started = await launch(launch_spec, sys.executable)
    if isinstance(started, ExitRecord):  # over before it could be watched
        return started
    await asyncio.wait_for(started.wait(), 30)
    return collect(InstanceDir(Path(launch_spec.instance_dir), 0), started.run)


async def gone(session: int) -> bool:
    """Whether no live process is left in the container's session (zombies aside)."""
    for _ in range(40):
        if not session_members(session):
            return True
        await asyncio.sleep(0.05)
    return False


async def test_exit_code_env_cwd_and_logs(tmp_path: Path) -> None:
    record = await run_to_end(
        spec(tmp_path, 'echo "$GREETING from $(pwd)"; echo warn >&2; printf tail; exit 3')
    )
    assert (record.exit_code, record.reason, record.signal) == (3, "Error", None)
    assert record.started_ns is not None and record.finished_ns >= record.started_ns
    log = Path(spec(tmp_path, "").instance_dir) / "output.log"
    records = [parse_record(line) for line in log.read_bytes().splitlines()]
    got = {(r.stream, r.data) for r in records if r is not None}
    assert got == {
        ("stdout", f"hi from {tmp_path}\n".encode()),
        ("stderr", b"warn\n"),
        ("stdout", b"tail"),
    }


async def test_completed(tmp_path: Path) -> None:
    record = await run_to_end(spec(tmp_path, "true"))
    assert (record.exit_code, record.reason) == (0, "Completed")


async def test_sigterm_reaches_the_process_group_and_kill_ends_everything(tmp_path: Path) -> None:
    started = await launch(spec(tmp_path, "sleep 60 & sleep 60; echo never"), sys.executable)
    assert isinstance(started, Supervised)
    await asyncio.sleep(0.2)
    started.signal(signal.SIGTERM)
    await asyncio.wait_for(started.wait(), 10)
    record = collect(InstanceDir(Path(spec(tmp_path, "").instance_dir), 0), started.run)
    assert (record.exit_code, record.signal) == (143, 15)
    assert await gone(started.run.pid)  # the background sleep went too

    stubborn = await launch(spec(tmp_path, "trap '' TERM; sleep 60"), sys.executable)
    assert isinstance(stubborn, Supervised)
    await asyncio.sleep(0.2)
    stubborn.signal(signal.SIGTERM)
    await asyncio.sleep(0.3)
    assert stubborn.alive
    stubborn.signal(SIGNAL_KILL)
    await asyncio.wait_for(stubborn.wait(), 10)
    killed = collect(InstanceDir(Path(spec(tmp_path, "").instance_dir), 0), stubborn.run)
    assert (killed.exit_code, killed.signal) == (137, 9)


async def test_a_command_that_cannot_run(tmp_path: Path) -> None:
    launch_spec = spec(tmp_path, "")
    launch_spec = LaunchSpec(**{**launch_spec.__dict__, "argv": ("no-such-command-vkpy",)})
    record = await launch(launch_spec, sys.executable)
    assert isinstance(record, ExitRecord)
    assert (record.exit_code, record.reason) == (128, "ContainerCannotRun")
    assert record.message == 'exec: "no-such-command-vkpy": executable file not found in $PATH'


async def test_watchdog_kills_over_the_limit(tmp_path: Path) -> None:
    hog = f"exec {sys.executable} -c 'x = bytearray(200 << 20); import time; time.sleep(30)'"
    record = await run_to_end(spec(tmp_path, hog, memory=64 << 20, mode="watchdog"))
    assert (record.exit_code, record.reason) == (137, "OOMKilled")
    assert record.message is not None and "over the limit 64Mi" in record.message


async def test_cgroup_limit_and_oom_kill(tmp_path: Path) -> None:
    parent = cgroups.detect(None)
    if parent is None:
        pytest.skip("no writable memory cgroup on this host")
    hog = f"exec {sys.executable} -c 'x = bytearray(200 << 20); import time; time.sleep(30)'"
    record = await run_to_end(
        spec(tmp_path, hog, memory=64 << 20, mode="cgroup", parent=str(parent.path))
    )
    assert (record.exit_code, record.reason) == (137, "OOMKilled")
    assert not (parent.path / f"test-{os.getpid()}").exists()  # removed afterwards


async def test_attach_checks_the_start_time(tmp_path: Path) -> None:
    started = await launch(spec(tmp_path, "sleep 30"), sys.executable)
    assert isinstance(started, Supervised)
    raw = read_json(Path(spec(tmp_path, "").instance_dir) / "run.json")
    run = RunRecord.from_dict(raw)
    assert run == started.run
    again = Supervised.attach(run)
    assert again is not None and again.alive
    recycled = RunRecord(**{**run.__dict__, "supervisor_start": run.supervisor_start + 1})
    assert Supervised.attach(recycled) is None
    again.detach()
    started.signal(SIGNAL_KILL)
    await asyncio.wait_for(started.wait(), 10)


async def test_a_vanished_supervisor_is_reported_and_its_child_killed(tmp_path: Path) -> None:
    started = await launch(spec(tmp_path, "sleep 30"), sys.executable)
    assert isinstance(started, Supervised)
    os.kill(started.run.supervisor_pid, signal.SIGKILL)
    await asyncio.wait_for(started.wait(), 10)
    record = collect(InstanceDir(Path(spec(tmp_path, "").instance_dir), 0), started.run)
    assert (record.exit_code, record.reason) == (137, "ContainerStatusUnknown")
    assert await gone(started.run.pid)


async def test_a_tty_container_runs_on_its_own_terminal_fed_by_the_stdin_fifo(
    tmp_path: Path,
) -> None:
    """Issue 12, finding 6: `tty: true` gets a pseudo-terminal (a shell shows a prompt)."""
    launch_spec = dataclasses.replace(
        spec(
            tmp_path,
            'tty; [ -t 0 ] && [ -t 1 ] && echo both-terminals; read -r line; echo "got $line"',
        ),
        tty=True,
        stdin_pipe=True,
    )
    started = await launch(launch_spec, sys.executable)
    assert isinstance(started, Supervised)
    assert started.run.tty is not None and started.run.tty.startswith("/dev/pts/")
    fifo = os.open(Path(launch_spec.instance_dir) / STDIN_FIFO, os.O_WRONLY)
    os.write(fifo, b"hello\n")
    os.close(fifo)
    await asyncio.wait_for(started.wait(), 30)
    record = collect(InstanceDir(Path(launch_spec.instance_dir), 0), started.run)
    assert record.exit_code == 0
    log = Path(launch_spec.instance_dir) / "output.log"
    lines = [parse_record(line) for line in log.read_bytes().splitlines()]
    text = b"".join(r.data + b"\n" for r in lines if r is not None and r.stream == "stdout")
    assert started.run.tty.encode() in text
    assert b"both-terminals" in text
    assert b"got hello" in text


async def test_a_kill_runs_the_runtimes_kill_command_first(tmp_path: Path) -> None:
    # runtime: oci: the container's processes are runc's, not in the supervisor's
    # process group; a kill goes through `runc kill` (here a command leaving a mark).
    marker = tmp_path / "runtime-kill"
    base = spec(tmp_path, "trap '' TERM; while :; do sleep 0.1; done")
    launch_spec = dataclasses.replace(base, kill_argv=("sh", "-c", f"echo KILL > {marker}"))
    started = await launch(launch_spec, sys.executable)
    assert isinstance(started, Supervised)
    started.signal(SIGNAL_KILL)
    await asyncio.wait_for(started.wait(), 10)
    assert marker.read_text() == "KILL\n"
    ended = collect(InstanceDir(Path(launch_spec.instance_dir), 0), started.run)
    assert ended.exit_code == 137
