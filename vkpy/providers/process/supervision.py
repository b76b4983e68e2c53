"""vkpy's side of a supervisor: start one, find one again, signal it, wait for it.

A supervisor is never vkpy's child for long (see supervisor.py): the launcher vkpy
starts exits as soon as the container runs, so a supervisor started now and one
adopted after a restart are handled the same way, by pid, checked against its start
time, and watched through a pidfd in the event loop (readable when the process
ends; no thread, no polling, no pid-reuse race when signalling). On hosts without
pidfds the liveness is polled instead.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import signal
import time
from pathlib import Path

import vkpy
from vkpy.providers.process import proc
from vkpy.providers.process.layout import InstanceDir, read_json, write_json
from vkpy.providers.process.records import ExitRecord, LaunchSpec, RunRecord

log = logging.getLogger(__name__)

SIGNAL_KILL = signal.SIGUSR1
POLL_SECONDS = 0.5
_PACKAGE_ROOT = str(Path(vkpy.__file__).resolve().parent.parent)


def helper_env() -> dict[str, str]:
    """The environment of supervisors and the exec helper: nothing of vkpy's own."""
    return {
        "PATH": "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
        "PYTHONPATH": _PACKAGE_ROOT,
        "PYTHONDONTWRITEBYTECODE": "1",
        "LC_ALL": "C.UTF-8",
    }


def helper_argv(python: str, module: str) -> list[str]:
    """How to run a helper: the exec helper as a plain isolated script (it imports
    nothing of vkpy, and starts in a third of the time), the rest as modules."""
    if module == "enter":
        return [python, "-I", "-S", str(Path(__file__).with_name("enter.py"))]
    return [python, "-S", "-m", f"vkpy.providers.process.{module}"]


class Supervised:
    """A running supervisor, known by pid and start time."""

    def __init__(self, run: RunRecord) -> None:
        self.run = run
        self._pidfd: int | None = None
        self._done: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._poller: asyncio.Task[None] | None = None

    @classmethod
    def attach(cls, run: RunRecord) -> Supervised | None:
        """Watch the supervisor of `run`; None when it is no longer running."""
        handle = cls(run)
        pidfd: int | None = None
        with contextlib.suppress(OSError, AttributeError):
            pidfd = os.pidfd_open(run.supervisor_pid)
        # Checked after opening: the pidfd then names the process that was checked.
        if not proc.is_same_process(run.supervisor_pid, run.supervisor_start):
            if pidfd is not None:
                os.close(pidfd)
            return None
        loop = asyncio.get_running_loop()
        if pidfd is not None:
            handle._pidfd = pidfd
            loop.add_reader(pidfd, handle._ended)
        else:
            handle._poller = loop.create_task(handle._poll(), name="supervisor-poll")
        return handle

    def _ended(self) -> None:
        if self._pidfd is not None:
            loop = asyncio.get_running_loop()
            loop.remove_reader(self._pidfd)
            os.close(self._pidfd)
            self._pidfd = None
        if not self._done.done():
            self._done.set_result(None)

    async def _poll(self) -> None:
        """Without pidfds there is nothing to wait on: poll the process."""
        while proc.is_same_process(self.run.supervisor_pid, self.run.supervisor_start):  # noqa: ASYNC110
            await asyncio.sleep(POLL_SECONDS)
        self._ended()

    @property
    def alive(self) -> bool:
        return not self._done.done()

    async def wait(self) -> None:
        """Until the supervisor (and so the container) has ended."""
        await asyncio.shield(self._done)

    def signal(self, sig: int) -> None:
        """SIGTERM: forwarded to the container's process group; SIGNAL_KILL: kill all."""
        if not self.alive:
            return
        with contextlib.suppress(ProcessLookupError, OSError):
            if self._pidfd is not None:
                signal.pidfd_send_signal(self._pidfd, sig)
            elif proc.is_same_process(self.run.supervisor_pid, self.run.supervisor_start):
                os.kill(self.run.supervisor_pid, sig)

    def detach(self) -> None:
        """Stop watching (vkpy is closing); the supervisor keeps running."""
        if self._poller is not None:
            self._poller.cancel()
        if self._pidfd is not None:
            asyncio.get_running_loop().remove_reader(self._pidfd)
            os.close(self._pidfd)
            self._pidfd = None


def kill_orphan(run: RunRecord) -> None:
    """The supervisor died without a word: kill its container if it is still there."""
    if proc.is_same_process(run.pid, run.pid_start):
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(run.pid, signal.SIGKILL)


async def launch(spec: LaunchSpec, python: str) -> Supervised | ExitRecord:
    """Start a supervisor for `spec`; its handle, or how the start failed."""
    instance = InstanceDir(Path(spec.instance_dir), 0)
    write_json(instance.spec, spec.to_dict())
    for stale in (instance.run, instance.exit):
        stale.unlink(missing_ok=True)
    with open(instance.supervisor_log, "ab") as errors:  # noqa: ASYNC230 (local, tiny)
        launcher = await asyncio.create_subprocess_exec(
            *helper_argv(python, "supervisor"),
            str(instance.spec),
            stdin=asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.PIPE,
            stderr=errors,
            env=helper_env(),
            cwd="/",
            start_new_session=True,
        )
    out, _ = await launcher.communicate()
    try:
        report = json.loads(out.decode() or "{}")
    except ValueError:
        report = {}
    if report.get("ok"):
        run = RunRecord.from_dict(report["run"])
        handle = Supervised.attach(run)
        if handle is not None:
            return handle
        # Already over: it has written exit.json (or died; see collect()).
        return collect(instance, run)
    exit_raw = read_json(instance.exit)
    if exit_raw is not None:
        return ExitRecord.from_dict(exit_raw)
    message = str(report.get("message") or "the supervisor did not start")
    log.warning("supervisor failed to start", extra={"instance": str(instance.path)})
    return ExitRecord(
        exit_code=128, finished_ns=_now_ns(), reason="ContainerCannotRun", message=message
    )


def collect(instance: InstanceDir, run: RunRecord | None) -> ExitRecord:
    """How an instance whose supervisor is gone ended (it wrote exit.json, or died)."""
    raw = read_json(instance.exit)
    if raw is not None:
        return ExitRecord.from_dict(raw)
    if run is not None:
        kill_orphan(run)
    return ExitRecord(
        exit_code=137,
        finished_ns=_now_ns(),
        reason="ContainerStatusUnknown",
        message="the container's supervisor ended without recording how the container ended",
        started_ns=run.started_ns if run else None,
        pid=run.pid if run else None,
    )


def _now_ns() -> int:
    return time.time_ns()
