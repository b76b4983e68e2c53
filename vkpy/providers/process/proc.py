"""Reading /proc: is this pid still the process we started, and what does it use.

A pid alone does not name a process across a restart of vkpy (pids are recycled), so
every pid the backend remembers comes with the process's start time in clock ticks
since boot (field 22 of /proc/<pid>/stat); a process is "the same" only when both
match. The same files give the fallback resource figures when no cgroup accounts for
a container: the processes of its session, their resident memory and CPU time.

Standard library only: the supervisor imports it.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

PAGE_SIZE = os.sysconf("SC_PAGE_SIZE")
TICKS = os.sysconf("SC_CLK_TCK")


@dataclass(frozen=True)
class ProcStat:
    """The fields of /proc/<pid>/stat the backend uses."""

    pid: int
    state: str
    pgrp: int
    session: int
    utime: int
    stime: int
    cutime: int
    cstime: int
    start_ticks: int
    rss_pages: int


def parse_stat(text: str) -> ProcStat:
    """Parse /proc/<pid>/stat (the command name may hold spaces and parentheses)."""
    pid_text, _, rest = text.partition(" (")
    fields = rest[rest.rindex(")") + 2 :].split()
    # fields[0] is field 3 (state) of proc(5).
    return ProcStat(
        pid=int(pid_text),
        state=fields[0],
        pgrp=int(fields[2]),
        session=int(fields[3]),
        utime=int(fields[11]),
        stime=int(fields[12]),
        cutime=int(fields[13]),
        cstime=int(fields[14]),
        start_ticks=int(fields[19]),
        rss_pages=int(fields[21]),
    )


def stat(pid: int) -> ProcStat | None:
    try:
        with open(f"/proc/{pid}/stat") as handle:
            return parse_stat(handle.read())
    except (OSError, ValueError, IndexError):
        return None


def start_ticks(pid: int) -> int | None:
    info = stat(pid)
    return None if info is None else info.start_ticks


def is_same_process(pid: int, ticks: int) -> bool:
    """Whether `pid` is still the process that started at `ticks` (and not a zombie)."""
    info = stat(pid)
    return info is not None and info.start_ticks == ticks and info.state not in ("Z", "X")


def session_members(session: int) -> list[ProcStat]:
    """Every live process of a session (a container's processes share one)."""
    out = []
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        info = stat(int(name))
        if info is not None and info.session == session and info.state not in ("Z", "X"):
            out.append(info)
    return out


def rss_bytes(members: list[ProcStat]) -> int:
    return sum(m.rss_pages for m in members) * PAGE_SIZE


def cpu_seconds(members: list[ProcStat]) -> float:
    """CPU time of the processes, including the children they have waited for."""
    ticks = sum(m.utime + m.stime + m.cutime + m.cstime for m in members)
    return ticks / TICKS


def boot_time() -> float:
    """Seconds since the epoch when the host booted (to turn ticks into times)."""
    with open("/proc/stat") as handle:
        for line in handle:
            if line.startswith("btime "):
                return float(line.split()[1])
    return 0.0
