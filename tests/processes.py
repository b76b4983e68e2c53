"""The test's own processes as /proc shows them, for the tests that stop things.

A stop is only done when nothing it should have ended still runs: the tests of
`devcluster up/down/run` and of the hybrid pools' stop look for processes by what
their command line mentions (a cluster directory, a node name) or where they run.
One reading of /proc serves them all (each had its own).
"""

from __future__ import annotations

import os
from pathlib import Path


def pid_alive(pid: int) -> bool:
    """Running (a zombie runs nothing and only its parent can reap it)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return False
    return stat[stat.rindex(")") + 2] not in "ZX"


def _command_line(pid: int) -> str:
    """The command line with its arguments joined by spaces ("" once it is gone)."""
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
    except OSError:
        return ""


def _pids() -> list[int]:
    return [int(name) for name in os.listdir("/proc") if name.isdigit()]


def running_with(text: str) -> list[int]:
    """PIDs of live processes whose command line contains `text`."""
    return [pid for pid in _pids() if text in _command_line(pid) and pid_alive(pid)]


def processes_under(directory: Path) -> list[str]:
    """Live processes whose command line mentions `directory` or whose working
    directory is below it, each as "pid: command line (cwd ...)" to show in a failure."""
    found = []
    for pid in _pids():
        try:
            cwd = os.readlink(f"/proc/{pid}/cwd")  # a zombie has none
        except OSError:
            continue
        cmdline = _command_line(pid)
        if str(directory) in cmdline or cwd.startswith(str(directory)):
            found.append(f"{pid}: {cmdline[:120]} (cwd {cwd})")
    return found
