"""The emulator's containers: each one a local process, restarted by the group's policy.

ACI runs images; the emulator runs the container's `command` (or a small idle
program when there is none) as a process on this machine, with the container's
environment, so logs, exec, attach and metrics have real output and real numbers.
A container goes Waiting -> Running -> Terminated with its exit code, and is run
again per the group's restart policy after a short back-off, counting restarts and
keeping the previous state, as ACI's instance view shows them.

A container that mounts the group's emptyDir volumes runs in a private mount
namespace of its own (`unshare --mount`), with each volume's directory (kept in the
group's directory, removed with the group) bind-mounted at its `mountPath`, read-only
when asked: so a file one container writes there, another reads. The emulator never
writes the host: a `mountPath` must be a directory that already exists on this
machine (/srv, /mnt, ...); a container mounting elsewhere is not started (Terminated,
"failed to start"). Containers without such mounts run as plain processes.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import shlex
import signal
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from azure.mgmt.containerinstance import models

from tests.aci_emulator import probes

IDLE = ["sh", "-c", "echo container started; exec sleep 2147483647"]
"""What a container without a command runs (an image's entrypoint, as far as we know)."""
BACKOFF_FIRST = 0.5
BACKOFF_MAX = 4.0


def now() -> datetime:
    return datetime.now(UTC)


@dataclass
class State:
    state: str
    start_time: datetime | None = None
    finish_time: datetime | None = None
    exit_code: int | None = None
    detail_status: str = ""

    def as_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"state": self.state, "detailStatus": self.detail_status}
        if self.start_time:
            out["startTime"] = self.start_time.isoformat()
        if self.finish_time:
            out["finishTime"] = self.finish_time.isoformat()
        if self.exit_code is not None:
            out["exitCode"] = self.exit_code
        return out


@dataclass(frozen=True)
class Mount:
    """A group volume's directory, bind-mounted at `target` in the container."""

    source: Path
    target: str
    read_only: bool = False


def mounted(argv: list[str], mounts: list[Mount]) -> list[str]:
    """`argv` run in a private mount namespace with `mounts` bound in it."""
    steps = []
    for m in mounts:
        source, target = shlex.quote(str(m.source)), shlex.quote(m.target)
        steps.append(f"mount --bind {source} {target}")
        if m.read_only:
            steps.append(f"mount -o remount,ro,bind {target}")
    script = " && ".join([*steps, 'exec "$@"'])
    return ["unshare", "--mount", "--propagation", "private", "sh", "-c", script, "sh", *argv]


@dataclass
class EventLog:
    """ACI's events of one container or group: repeats counted on one entry."""

    items: list[dict[str, Any]] = field(default_factory=list)

    def add(self, name: str, message: str, type_: str = "Normal") -> None:
        stamp = now().isoformat()
        for item in self.items:
            if item["name"] == name and item["message"] == message:
                item["count"] += 1
                item["lastTimestamp"] = stamp
                return
        self.items.append(
            {
                "count": 1,
                "firstTimestamp": stamp,
                "lastTimestamp": stamp,
                "name": name,
                "message": message,
                "type": type_,
            }
        )


@dataclass
class Container:
    """One container of a group and its current process."""

    name: str
    image: str
    argv: list[str]
    env: dict[str, str]
    workdir: Path
    restart_policy: str
    current: State = field(default_factory=lambda: State("Waiting", detail_status="Pending"))
    previous: State | None = None
    restart_count: int = 0
    events: EventLog = field(default_factory=EventLog)
    logs: list[tuple[datetime, bytes]] = field(default_factory=list)
    process: asyncio.subprocess.Process | None = None
    listeners: list[asyncio.Queue[bytes | None]] = field(default_factory=list)
    stopping: bool = False
    liveness: models.ContainerProbe | None = None
    readiness: models.ContainerProbe | None = None
    killed_unhealthy: bool = False
    mounts: list[Mount] = field(default_factory=list)

    def instance_view(self) -> dict[str, Any]:
        return {
            "restartCount": self.restart_count,
            "currentState": self.current.as_dict(),
            "previousState": self.previous.as_dict() if self.previous else None,
            "events": list(self.events.items),
        }

    def environment(self) -> dict[str, str]:
        return {
            "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
            "HOME": str(self.workdir),
            **self.env,
        }

    async def run_once(self) -> int:
        """Start the process, collect its output until it exits; its exit code."""
        self.events.add("Started", f"Started container {self.name}")
        missing = [m.target for m in self.mounts if not os.path.isdir(m.target)]
        if missing:  # never create directories on the host: refuse, as a failed start
            self.current = State("Terminated", now(), now(), 128, "Error")
            self._output(
                f"failed to start: mount path {missing[0]} does not exist on this host "
                "(the emulator mounts volumes only onto existing directories)\n".encode()
            )
            return 128
        argv = mounted(self.argv, self.mounts) if self.mounts else self.argv
        try:
            self.process = await asyncio.create_subprocess_exec(
                *argv,
                stdin=asyncio.subprocess.DEVNULL,
                stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.STDOUT,
                cwd=self.workdir,
                env=self.environment(),
                start_new_session=True,
            )
        except OSError as error:
            self.current = State("Terminated", now(), now(), 128, "Error")
            self._output(f"failed to start: {error.strerror}\n".encode())
            return 128
        self.current = State("Running", now(), detail_status="")
        assert self.process.stdout is not None
        watchers = self._probe(self.process)
        try:
            while line := await self.process.stdout.readline():
                self._output(line)
            code = await self.process.wait()
        finally:
            for watcher in watchers:
                watcher.cancel()
            await asyncio.gather(*watchers, return_exceptions=True)
        code = 128 - code if code < 0 else code  # killed by a signal: 128+n as ACI says
        self.current = State(
            "Terminated",
            self.current.start_time,
            now(),
            code,
            "Completed" if code == 0 else "Error",
        )
        return code

    def _probe(self, process: asyncio.subprocess.Process) -> list[asyncio.Task[None]]:
        """Start the container's probes for this run of its process (see `probes`)."""

        async def kill() -> None:
            self.killed_unhealthy = True
            self.events.add(
                "Killing", f"Container {self.name} failed liveness probe, will be restarted"
            )
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGKILL)

        watchers = []
        for kind, probe, on_failed in (
            ("Liveness", self.liveness, kill),
            ("Readiness", self.readiness, None),
        ):
            if probe is not None:
                watcher = probes.watch(
                    kind, probe, self.environment(), self.workdir, self.events.add, on_failed
                )
                watchers.append(asyncio.create_task(watcher, name=f"{kind} {self.name}"))
        return watchers

    def _output(self, data: bytes) -> None:
        self.logs.append((now(), data))
        for queue in self.listeners:
            queue.put_nowait(data)

    async def supervise(self, on_change: Callable[[], None]) -> None:
        """Run, and run again per the restart policy, until stopped."""
        delay = BACKOFF_FIRST
        while not self.stopping:
            code = await self.run_once()
            on_change()
            if self.stopping:
                break
            again = self.restart_policy == "Always" or (
                self.restart_policy == "OnFailure" and code != 0
            )
            if not again:
                break
            if not self.killed_unhealthy:  # else its liveness probe said why already
                self.events.add("Killing", f"Killing container {self.name}: exited with {code}")
            self.killed_unhealthy = False
            await asyncio.sleep(delay)
            delay = min(delay * 2, BACKOFF_MAX)
            if self.stopping:
                break
            self.previous = self.current
            self.restart_count += 1
            self.logs.clear()
        for queue in self.listeners:
            queue.put_nowait(None)

    async def stop(self) -> None:
        self.stopping = True
        process = self.process
        if process is not None and process.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGKILL)
            with contextlib.suppress(Exception):
                await process.wait()

    def cpu_and_memory(self) -> tuple[float, int]:
        """CPU seconds used and resident bytes of the process (0 when not running)."""
        process = self.process
        if process is None or process.returncode is not None:
            return 0.0, 0
        try:
            fields = Path(f"/proc/{process.pid}/stat").read_text().rsplit(")", 1)[1].split()
            pages = int(Path(f"/proc/{process.pid}/statm").read_text().split()[1])
        except (OSError, IndexError, ValueError):
            return 0.0, 0
        ticks = os.sysconf("SC_CLK_TCK")
        return (int(fields[11]) + int(fields[12])) / ticks, pages * os.sysconf("SC_PAGE_SIZE")
