"""runc, the OCI runtime, driven from asyncio: create, start, state, list, kill,
delete, exec, stats (`events --stats`) and ps, with one state directory per node.

What runc now does that the process backend did by hand (vkpy/providers/process):
the pod's namespaces (namespaces.py's holder, podnet.py's network namespace, the
setns calls of enter.py), the filesystem view (podroot.py, podmounts.py and the
ctypes mount calls of mountcalls.py: runc pivots into the image's root and
bind-mounts the volumes), capabilities, no_new_privs and the seccomp filter
(seccomp.py's hand-assembled BPF: runc loads the profile through libseccomp), the
change of user (privileges.py, enter.py: runc sets the ids inside the pod's user
namespace) and the container's cgroup and its limits (cgroups.py's limit writing:
runc handles v1, v2 and hybrid hosts).

Containers outlive vkpy. `create` runs `runc create`, which leaves the container's
init process waiting, detached from runc, with the standard input, output and error
it was given (runc's "pass-through" mode) or with a pseudo-terminal whose master
side runc sends to `console_socket`; `start` lets it run. runc keeps each
container's state in `root/<id>`, so a new `Runc` on the same root (a restarted
vkpy) sees every container with `containers` (runc list) and `state`, and controls
it with `kill`, `exec`, `delete`: adoption is by id, nothing is held in memory.

Logs go to files without vkpy in the pipe: the caller gives the output pipes' write
ends to `create`, and a process that outlives vkpy keeps the read ends and writes
the CRI log format, as conmon does for CRI-O. That is the process backend's
supervisor (supervisor.py with logfile.py) when wired; it also stays the
container's reaper (a child subreaper, so it records the exit code that `runc
state` does not keep). A plain file given as stdout works too (the tests do it):
the container then writes raw output to it.

Errors are typed (ContainerNotFound, ContainerExists, RuncError) and carry runc's own
message, read from its JSON log (`--log`), never from the container's output.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

Fd = int | IO[Any] | None


class RuncError(RuntimeError):
    """runc failed: the command, its exit status and runc's message."""

    def __init__(self, command: Sequence[str], code: int, message: str) -> None:
        super().__init__(f"runc {' '.join(command)}: {message or f'exit status {code}'}")
        self.command = tuple(command)
        self.code = code
        self.message = message


class ContainerNotFound(RuncError):
    """No container of that id in this runtime's state directory."""


class ContainerExists(RuncError):
    """A container of that id exists already."""


@dataclass(frozen=True)
class State:
    """`runc state`: status is "created", "running", "paused" or "stopped"."""

    id: str
    pid: int
    status: str
    bundle: str
    created: str
    annotations: Mapping[str, str]

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> State:
        return cls(
            id=data["id"],
            pid=int(data.get("pid") or 0),
            status=data["status"],
            bundle=data.get("bundle", ""),
            created=data.get("created", ""),
            annotations=data.get("annotations") or {},
        )


@dataclass(frozen=True)
class ExecResult:
    code: int
    stdout: bytes
    stderr: bytes


def write_bundle(bundle: Path, spec: Mapping[str, Any]) -> Path:
    """Write `spec` as the bundle's config.json (the rootfs is where spec says),
    readable by root only: its environment may hold a Secret's values."""
    bundle.mkdir(parents=True, exist_ok=True)
    path = bundle / "config.json"
    temporary = bundle / "config.json.new"
    handle = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(handle, "w") as out:
        json.dump(spec, out, indent=1)
    os.chmod(temporary, 0o600)
    os.replace(temporary, path)
    return path


class Runc:
    """runc with its state in `root` (one per node: every pod's containers)."""

    def __init__(self, root: Path, binary: str = "runc") -> None:
        self.root = root
        self.binary = binary

    async def create(
        self,
        container_id: str,
        bundle: Path,
        *,
        stdin: Fd = None,
        stdout: Fd = None,
        stderr: Fd = None,
        console_socket: Path | None = None,
        pid_file: Path | None = None,
    ) -> None:
        """Create the container of `bundle`/config.json; its process waits for
        `start`. Without a console socket its stdio are the ones given (the null
        device for None)."""
        args = ["create", "--bundle", str(bundle)]
        if console_socket is not None:
            args += ["--console-socket", str(console_socket)]
        if pid_file is not None:
            args += ["--pid-file", str(pid_file)]
        await self._call(
            [*args, container_id], capture=False, stdin=stdin, stdout=stdout, stderr=stderr
        )

    async def start(self, container_id: str) -> None:
        await self._call(["start", container_id])

    async def run_detached(
        self,
        container_id: str,
        bundle: Path,
        *,
        stdin: Fd = None,
        stdout: Fd = None,
        stderr: Fd = None,
        console_socket: Path | None = None,
    ) -> State:
        """create + start in one runc process (`run --detach`, its pid from
        `--pid-file`: one runc start-up instead of three); a container that could not
        start is deleted again."""
        with tempfile.TemporaryDirectory(prefix="runc-run-") as scratch:
            pid_file = Path(scratch) / "pid"
            args = ["run", "--detach", "--bundle", str(bundle), "--pid-file", str(pid_file)]
            if console_socket is not None:
                args += ["--console-socket", str(console_socket)]
            try:
                await self._call(
                    [*args, container_id], capture=False, stdin=stdin, stdout=stdout, stderr=stderr
                )
            except ContainerExists:
                raise
            except RuncError:
                with contextlib.suppress(RuncError):
                    await self.delete(container_id, force=True)
                raise
            pid = int(pid_file.read_text().strip())
        return State(container_id, pid, "running", str(bundle), "", {})

    async def state(self, container_id: str) -> State:
        out = await self._call(["state", container_id])
        return State.from_json(json.loads(out))

    async def containers(self) -> list[State]:
        out = await self._call(["list", "--format", "json"])
        return [State.from_json(item) for item in json.loads(out or b"null") or []]

    async def kill(self, container_id: str, signal: str = "TERM", *, all: bool = False) -> None:
        """Send `signal` to the container's init (with `all`, to all its processes)."""
        await self._call(["kill", *(["--all"] if all else []), container_id, signal])

    async def delete(self, container_id: str, *, force: bool = False) -> None:
        """Remove a stopped container's state and cgroup (`force`: kill it first)."""
        await self._call(["delete", *(["--force"] if force else []), container_id])

    async def exec(
        self,
        container_id: str,
        process: Mapping[str, Any],
        *,
        stdin: Fd = None,
        stdout: Fd = None,
        stderr: Fd = None,
        console_socket: Path | None = None,
        detach: bool = False,
        pid_file: Path | None = None,
    ) -> int:
        """Run `process` (spec.process(...)) in the container; its exit status, or 0
        once a detached one started. A terminal (`process["terminal"]`) goes to
        `console_socket` (console.py), which runc allows only detached: the process
        is then not runc's child, and its exit status goes to the nearest child
        subreaper (the supervisor, when wired); `pid_file` names it."""
        with _temp_json(process) as process_path:
            args = ["exec", "--process", str(process_path)]
            if console_socket is not None:
                args += ["--console-socket", str(console_socket)]
                detach = True
            if detach:
                args.append("--detach")
            if pid_file is not None:
                args += ["--pid-file", str(pid_file)]
            return await self._call_code(
                [*args, container_id], stdin=stdin, stdout=stdout, stderr=stderr
            )

    async def exec_output(
        self, container_id: str, process: Mapping[str, Any], stdin: bytes = b""
    ) -> ExecResult:
        """`exec` with the output collected (probes, hooks, tests)."""
        with _temp_json(process) as process_path:
            args = ["exec", "--process", str(process_path), container_id]
            outcome = await self._execute(args, capture=True, input=stdin)
        if outcome.error:
            raise self._error(args, outcome.code, outcome.error)
        return ExecResult(outcome.code, outcome.stdout, outcome.stderr)

    async def stats(self, container_id: str) -> dict[str, Any]:
        """`runc events --stats`: cgroup CPU, memory, pids and I/O figures."""
        out = await self._call(["events", "--stats", container_id])
        data: dict[str, Any] = json.loads(out).get("data") or {}
        return data

    async def ps(self, container_id: str) -> list[int]:
        """Host pids of the container's processes."""
        out = await self._call(["ps", "--format", "json", container_id])
        return [int(pid) for pid in json.loads(out or b"null") or []]

    async def _call(
        self,
        args: Sequence[str],
        *,
        capture: bool = True,
        stdin: Fd = None,
        stdout: Fd = None,
        stderr: Fd = None,
    ) -> bytes:
        outcome = await self._execute(
            args, capture=capture, stdin=stdin, stdout=stdout, stderr=stderr
        )
        if outcome.error or outcome.code != 0:
            raise self._error(args, outcome.code, outcome.error or outcome.stderr.decode())
        return outcome.stdout

    async def _call_code(
        self, args: Sequence[str], *, stdin: Fd = None, stdout: Fd = None, stderr: Fd = None
    ) -> int:
        outcome = await self._execute(
            args, capture=False, stdin=stdin, stdout=stdout, stderr=stderr
        )
        if outcome.error:
            raise self._error(args, outcome.code, outcome.error)
        return outcome.code

    async def _execute(
        self,
        args: Sequence[str],
        *,
        capture: bool,
        input: bytes = b"",
        stdin: Fd = None,
        stdout: Fd = None,
        stderr: Fd = None,
    ) -> _Outcome:
        """Run runc; with `capture`, its stdout and stderr are collected (else they
        are the given ones, the null device for None). runc's own error message
        comes from its JSON log, apart from any output of the container."""
        handle, log_path = tempfile.mkstemp(prefix="runc-", suffix=".log")
        os.close(handle)
        pipe, null = asyncio.subprocess.PIPE, asyncio.subprocess.DEVNULL
        try:
            process = await asyncio.create_subprocess_exec(
                self.binary,
                "--root",
                str(self.root),
                "--log",
                log_path,
                "--log-format",
                "json",
                *args,
                stdin=pipe if input else (null if stdin is None else stdin),
                stdout=pipe if capture else (null if stdout is None else stdout),
                stderr=pipe if capture else (null if stderr is None else stderr),
            )
            out, err = await process.communicate(input or None)
            code = process.returncode
            assert code is not None
            return _Outcome(code, out or b"", err or b"", _last_error(Path(log_path)))
        finally:
            os.unlink(log_path)

    @staticmethod
    def _error(args: Sequence[str], code: int, message: str) -> RuncError:
        text = message.strip()
        if "does not exist" in text:
            return ContainerNotFound(args, code, text)
        if "already exists" in text:
            return ContainerExists(args, code, text)
        return RuncError(args, code, text)


@dataclass(frozen=True)
class _Outcome:
    code: int
    stdout: bytes
    stderr: bytes
    error: str
    """runc's own last error message ("" when it logged none)."""


def _last_error(log: Path) -> str:
    """runc's last error-level message in its JSON log ("" if none)."""
    message = ""
    with contextlib.suppress(OSError):
        for line in log.read_text(errors="replace").splitlines():
            with contextlib.suppress(ValueError):
                entry = json.loads(line)
                if isinstance(entry, dict) and entry.get("level") in ("error", "fatal"):
                    message = str(entry.get("msg", ""))
    return message


@contextlib.contextmanager
def _temp_json(data: Mapping[str, Any]) -> Any:
    handle, path = tempfile.mkstemp(prefix="runc-process-", suffix=".json")
    try:
        with os.fdopen(handle, "w") as out:
            json.dump(data, out)
        yield Path(path)
    finally:
        os.unlink(path)
