"""The records the provider and a container's supervisor exchange through files.

The supervisor outlives vkpy, so everything between them is a small JSON file in the
instance directory, written atomically: the provider writes `spec.json` (what to run,
as whom, where its output goes, the memory limit), the supervisor writes `run.json`
once the process runs (its pid and start time, so a restarted vkpy can tell the same
process from a recycled pid) and `exit.json` when it ended (exit code, signal, OOM).
`ProcessContext` is how every process of a container is started (the main process,
and probes, hooks and exec sessions): environment, directory, user, cgroup.

Standard library only: the supervisor imports it.
"""

from __future__ import annotations

import os
import time
from dataclasses import asdict, dataclass, field
from typing import Any, Literal

MemoryMode = Literal["cgroup", "watchdog", "none"]

EXIT_CANNOT_RUN = 128
"""Exit code reported when the command could not be executed (as container runtimes do)."""
STDIN_FIFO = "stdin"
"""The FIFO in an instance directory that is the process's stdin (with `stdin_pipe`)."""


@dataclass(frozen=True)
class ProcessContext:
    """How a process of the container starts: environment, directory, identity."""

    env: tuple[tuple[str, str], ...] = field(repr=False)
    cwd: str
    uid: int | None = None
    """Switch to this user (vkpy runs as root); None: stay who vkpy is."""
    gid: int | None = None
    groups: tuple[int, ...] = ()
    umask: int = 0o022
    namespaces: tuple[str, ...] = ()
    """Namespace files (`/proc/<holder>/ns/uts`, ...) to join first (namespaces.py)."""
    mounts: tuple[tuple[str, str, str, bool], ...] = ()
    """With the pod's filesystem: the container's volumes (sandbox.py, podmounts.py)."""
    readonly_root: bool = False
    """`readOnlyRootFilesystem`: with the pod's filesystem, only volumes are writable."""
    pid_namespace: str = ""
    """With the pod's filesystem: the pod's PID namespace (`/proc/<holder>/ns/pid`),
    entered before the fork that starts each process; "": the host's."""
    capabilities: tuple[str, ...] = ()
    """Capabilities the process keeps (names without `CAP_`); none by default (seccomp.py)."""
    privileged: bool = False
    """Every capability, no `no_new_privs`, no seccomp filter (only if the node allows)."""
    seccomp: bool = True
    """The seccomp filter (`RuntimeDefault`); False: `Unconfined` (if the node allows)."""

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, raw: dict[str, Any]) -> ProcessContext:
        return cls(
            env=tuple((str(k), str(v)) for k, v in raw["env"]),
            cwd=str(raw["cwd"]),
            uid=raw.get("uid"),
            gid=raw.get("gid"),
            groups=tuple(int(g) for g in raw.get("groups") or ()),
            umask=int(raw.get("umask", 0o022)),
            namespaces=tuple(str(n) for n in raw.get("namespaces") or ()),
            mounts=tuple(
                (str(b), str(r), str(t), bool(o)) for b, r, t, o in raw.get("mounts") or ()
            ),
            readonly_root=bool(raw.get("readonly_root")),
            pid_namespace=str(raw.get("pid_namespace") or ""),
            capabilities=tuple(str(c) for c in raw.get("capabilities") or ()),
            privileged=bool(raw.get("privileged", False)),
            seccomp=bool(raw.get("seccomp", True)),
        )


@dataclass(frozen=True)
class LaunchSpec:
    """What a supervisor runs, and how."""

    argv: tuple[str, ...]
    context: ProcessContext
    instance_dir: str
    log_max_bytes: int
    log_max_files: int
    memory_limit: int | None = None
    """Bytes; None: no limit."""
    memory_mode: MemoryMode = "none"
    cgroup_parent: str | None = None
    """Directory under which the supervisor makes the container's cgroup (cgroup mode)."""
    cgroup_name: str = ""
    watchdog_interval: float = 0.25
    stdin_pipe: bool = False
    """Give the process a stdin that `kubectl attach` can write to (containers with
    `stdin: true`): the FIFO `STDIN_FIFO` in the instance directory."""
    stdin_once: bool = False
    """`stdinOnce: true` (without a tty): the process's stdin is closed when the first
    writer of the FIFO (the first attach session) goes away, as a container runtime
    closes it after one attach."""
    tty: bool = False
    """Run the process on a pseudo-terminal (`tty: true`): the supervisor holds the
    master side, logs what it prints as stdout and writes the stdin FIFO into it."""
    kill_argv: tuple[str, ...] = ()
    exec_prefix: tuple[str, ...] = ()
    """How another process runs in the container (`runtime: oci`: `runc --root R
    exec`, then `-t` with a terminal, then `exec_target` and the command): the exec
    helper (enter.py) runs probes', hooks' and exec sessions' commands through it
    instead of entering the context itself."""
    exec_target: str = ""
    runtime_cgroup: str = ""
    pid_file: str = ""
    """Detached runs (`runtime: oci`, when set): `argv` is `runc run --detach`, which
    writes the container's pid here and exits. The supervisor, a child subreaper, is
    then the container's parent: no runtime process stays, and the exit status is the
    container's own."""
    output_owner: int | None = None
    """Detached runs: the host id the container's output pipes belong to (its pod's
    root), as runc gives the pipes it makes to the container's root: a program that
    reopens /dev/stdout or /dev/stderr (nginx's log links) in its user namespace can,
    where a pipe of the host's root is out of its reach."""
    runtime_log: str = ""
    """runc's JSON log of the create and start (its error message when they fail)."""
    delete_argv: tuple[str, ...] = ()
    """Run once the process ended and `runtime_cgroup`'s OOM kills were counted
    (`runc delete`: `runc run --keep` leaves the cgroup until then)."""
    """`runtime: oci`: the container's cgroup that runc made (its memory hierarchy's
    directory), recorded in run.json for stats; the supervisor makes none itself."""
    """Run on a kill (SIGUSR1) before the process group is killed: `runc kill` for a
    container that runc runs (`runtime: oci`), whose processes are not in the group."""

    def to_dict(self) -> dict[str, Any]:
        out = asdict(self)
        out["context"] = self.context.to_dict()
        return out

    @classmethod
    def from_dict(cls, raw: dict[str, Any]) -> LaunchSpec:
        values = dict(raw)
        values["argv"] = tuple(str(a) for a in raw["argv"])
        values["kill_argv"] = tuple(str(a) for a in raw.get("kill_argv") or ())
        values["exec_prefix"] = tuple(str(a) for a in raw.get("exec_prefix") or ())
        values["delete_argv"] = tuple(str(a) for a in raw.get("delete_argv") or ())
        values["context"] = ProcessContext.from_dict(raw["context"])
        return cls(**values)


@dataclass(frozen=True)
class RunRecord:
    """A running instance: who supervises it and which process it is."""

    supervisor_pid: int
    supervisor_start: int
    """Start time of the supervisor in clock ticks since boot (/proc/<pid>/stat)."""
    pid: int
    """The container's main process; also its process group and session id."""
    pid_start: int
    started_ns: int
    """Wall clock (ns since the epoch) when the process was started."""
    cgroup: str | None = None
    tty: str | None = None
    """The terminal's device (`/dev/pts/N`) of a `tty: true` container: attach sets
    its size there."""

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, raw: dict[str, Any]) -> RunRecord:
        return cls(**raw)


@dataclass(frozen=True)
class ExitRecord:
    """How an instance ended, in the terms of a ContainerStateTerminated."""

    exit_code: int
    finished_ns: int
    reason: str
    """Completed, Error, OOMKilled, ContainerCannotRun or ContainerStatusUnknown."""
    signal: int | None = None
    message: str | None = None
    started_ns: int | None = None
    pid: int | None = None
    """The main process it was (for the container ID of lastState)."""

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, raw: dict[str, Any]) -> ExitRecord:
        return cls(**raw)

    @classmethod
    def from_status(
        cls,
        status: int,
        *,
        oom: bool,
        started_ns: int | None,
        pid: int | None = None,
        message: str | None = None,
    ) -> ExitRecord:
        """From a wait status; a signal is reported as 128 + its number."""
        signal: int | None = None
        if os.WIFSIGNALED(status):
            signal = os.WTERMSIG(status)
            code = 128 + signal
        else:
            code = os.WEXITSTATUS(status)
        if oom:
            reason = "OOMKilled"
        elif code == 0:
            reason = "Completed"
        else:
            reason = "Error"
        return cls(
            exit_code=code,
            finished_ns=time.time_ns(),
            reason=reason,
            signal=signal,
            message=message,
            started_ns=started_ns,
            pid=pid,
        )
