"""Starting, recognising and stopping the control-plane processes.

The dev cluster's components outlive the command that started them (`up` returns,
`down` runs later from another process), so they are tracked by PID in a state file.
A bare PID is not enough to stop something safely: PIDs are reused. Each process is
therefore recorded with its kernel start time, started in its own session (so its
whole process group can be signalled), and only signalled while both still match.
A zombie counts as stopped: it runs nothing, and only its parent can reap it.
"""

from __future__ import annotations

import contextlib
import os
import signal
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

#: How many log lines an error shows.
TAIL_LINES = 30


@dataclass(frozen=True)
class ProcessRecord:
    """One started component, as written to state.json."""

    name: str
    pid: int
    #: /proc/<pid>/stat field 22 (start time in clock ticks since boot); 0 when unknown.
    start_ticks: int
    log: Path
    argv: tuple[str, ...]

    def to_json(self) -> dict[str, object]:
        return {
            "name": self.name,
            "pid": self.pid,
            "start_ticks": self.start_ticks,
            "log": str(self.log),
            "argv": list(self.argv),
        }

    @classmethod
    def from_json(cls, data: Mapping[str, object]) -> ProcessRecord:
        argv = data["argv"]
        if not isinstance(argv, list):
            raise ValueError(f"bad argv in state: {argv!r}")
        return cls(
            name=str(data["name"]),
            pid=_as_int(data["pid"]),
            start_ticks=_as_int(data["start_ticks"]),
            log=Path(str(data["log"])),
            argv=tuple(str(a) for a in argv),
        )


def _as_int(value: object) -> int:
    if not isinstance(value, int):
        raise ValueError(f"expected an integer in state, got {value!r}")
    return value


def _proc_stat(pid: int) -> tuple[str, int] | None:
    """(state letter, start ticks) of a live or zombie process; None when it is gone.

    Without /proc (not Linux) falls back to `kill(pid, 0)` with unknown start time.
    """
    try:
        raw = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        if Path("/proc/self/stat").exists():
            return None
        return _kill_zero(pid)
    except (ProcessLookupError, PermissionError):
        return None
    # "pid (comm) state ppid ...": comm may hold spaces and parentheses.
    fields = raw[raw.rindex(")") + 2 :].split()
    return fields[0], int(fields[19])


def _kill_zero(pid: int) -> tuple[str, int] | None:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return None
    except PermissionError:
        pass  # exists, owned by someone else
    return "?", 0


def start_ticks(pid: int) -> int:
    stat = _proc_stat(pid)
    return stat[1] if stat else 0


def is_running(record: ProcessRecord) -> bool:
    """True when the recorded process still exists, is not a zombie, and is the same one."""
    stat = _proc_stat(record.pid)
    if stat is None:
        return False
    state, ticks = stat
    if state in ("Z", "X"):
        return False
    return record.start_ticks in (0, ticks)


def spawn(name: str, argv: Sequence[str], log: Path, *, env: Mapping[str, str]) -> ProcessRecord:
    """Start `argv` detached: own session, stdin from /dev/null, output to `log`.

    posix_spawn rather than subprocess.Popen: the process is meant to outlive this
    Python process, and a Popen object for a child still running when it is
    collected warns and queues the child for reaping. Reap with `exit_code`.
    """
    log.parent.mkdir(parents=True, exist_ok=True)
    with log.open("wb") as out:
        pid = os.posix_spawn(
            argv[0],
            list(argv),
            dict(env),
            file_actions=[
                (os.POSIX_SPAWN_OPEN, 0, os.devnull, os.O_RDONLY, 0),
                (os.POSIX_SPAWN_DUP2, out.fileno(), 1),
                (os.POSIX_SPAWN_DUP2, out.fileno(), 2),
            ],
            setsid=True,
            # Python ignores SIGPIPE and SIGXFSZ; the components expect the defaults.
            setsigdef=(signal.SIGPIPE, signal.SIGXFSZ),
        )
    return ProcessRecord(name, pid, start_ticks(pid), log, tuple(argv))


def exit_code(pid: int) -> int | None:
    """Reap our child `pid` if it has exited and return its exit code.

    None while it runs, or when it is not (or no longer) our child to reap.
    """
    try:
        reaped, status = os.waitpid(pid, os.WNOHANG)
    except ChildProcessError:
        return None
    return os.waitstatus_to_exitcode(status) if reaped else None


def _signal_group(record: ProcessRecord, sig: signal.Signals) -> None:
    # The process leads its own group (start_new_session), so pgid == pid.
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(record.pid, sig)


def _wait_gone(records: Sequence[ProcessRecord], timeout: float) -> list[ProcessRecord]:
    """Wait until the processes are gone; return those still running at the timeout."""
    deadline = time.monotonic() + timeout
    while True:
        for record in records:
            exit_code(record.pid)  # a child of ours would stay a zombie otherwise
        alive = [r for r in records if is_running(r)]
        if not alive or time.monotonic() >= deadline:
            return alive
        time.sleep(0.05)


def stop(records: Iterable[ProcessRecord], grace: float = 5.0) -> list[ProcessRecord]:
    """SIGTERM every recorded process group, SIGKILL what is left after `grace`.

    Only processes that are still the recorded ones are signalled. Returns the
    processes that even SIGKILL did not remove within a few seconds (normally none).
    """
    alive = [r for r in records if is_running(r)]
    for record in alive:
        _signal_group(record, signal.SIGTERM)
    alive = _wait_gone(alive, grace)
    for record in alive:
        _signal_group(record, signal.SIGKILL)
    return _wait_gone(alive, 5.0)


def kill(records: Iterable[ProcessRecord]) -> list[ProcessRecord]:
    """SIGKILL every recorded process group at once (a crash, not a stop); return
    the processes still there after a few seconds (normally none)."""
    alive = [r for r in records if is_running(r)]
    for record in alive:
        _signal_group(record, signal.SIGKILL)
    return _wait_gone(alive, 5.0)


def tail(path: Path, lines: int = TAIL_LINES) -> str:
    """The last `lines` lines of a log file (empty when it does not exist)."""
    try:
        with path.open("rb") as f:
            f.seek(0, os.SEEK_END)
            f.seek(max(0, f.tell() - 256 * 1024))
            data = f.read()
    except FileNotFoundError:
        return ""
    return "\n".join(data.decode(errors="replace").splitlines()[-lines:])
