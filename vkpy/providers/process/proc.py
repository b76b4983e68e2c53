"""Reading /proc: is this pid still the process we started, and what does it use.

A pid alone does not name a process across a restart of vkpy (pids are recycled), so
every pid the backend remembers comes with the process's start time in clock ticks
since boot (field 22 of /proc/<pid>/stat); a process is "the same" only when both
match. The same files give the fallback resource figures when no cgroup accounts for
a container: the processes of its session, their resident memory and CPU time (in
nanoseconds from the threads' schedstat, since clock ticks round an idle process to 0).

Standard library only: the supervisor imports it.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from dataclasses import dataclass

PAGE_SIZE = os.sysconf("SC_PAGE_SIZE")
TICKS = os.sysconf("SC_CLK_TCK")


@dataclass(frozen=True)
class ProcStat:
    """The fields of /proc/<pid>/stat the backend uses."""

    pid: int
    state: str
    ppid: int
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
        ppid=int(fields[1]),
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


def every() -> Iterator[ProcStat]:
    """Every process on the host (those that end while being read are left out)."""
    for name in os.listdir("/proc"):
        info = stat(int(name)) if name.isdigit() else None
        if info is not None:
            yield info


def session_members(session: int) -> list[ProcStat]:
    """Every live process of a session (a container's processes share one)."""
    return [i for i in every() if i.session == session and i.state not in ("Z", "X")]


def pids_of_users(uids: frozenset[int]) -> list[int]:
    """Every process running as one of `uids`."""
    out = []
    for name in os.listdir("/proc"):
        if name.isdigit():
            try:
                if os.stat(f"/proc/{name}").st_uid in uids:
                    out.append(int(name))
            except OSError:
                continue
    return out


def rss_bytes(members: list[ProcStat]) -> int:
    return sum(m.rss_pages for m in members) * PAGE_SIZE


def threads_cpu_ns(pid: int) -> int | None:
    """CPU time of the process's live threads in nanoseconds (the first field of each
    /proc/<pid>/task/<tid>/schedstat); None where the kernel does not keep it."""
    try:
        tids = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return None
    total: int | None = None
    for tid in tids:
        try:
            with open(f"/proc/{pid}/task/{tid}/schedstat") as handle:
                value = int(handle.read().split()[0])
        except (OSError, ValueError, IndexError):
            continue  # the thread ended meanwhile (or no schedstat at all)
        total = (total or 0) + value
    return total


def cpu_seconds(members: list[ProcStat]) -> float:
    """CPU time of the processes, including the children they have waited for.

    /proc/<pid>/stat counts in clock ticks (10 ms): a process that used 3 ms shows 0,
    and metrics-server drops a pod whose CPU is 0. So each process counts the
    nanoseconds of its threads' schedstat, or its ticks where those are more (they
    also hold threads that have ended); children it waited for only exist in ticks."""
    total = 0.0
    for m in members:
        ticks = (m.utime + m.stime) / TICKS
        precise = threads_cpu_ns(m.pid)
        total += max(ticks, precise / 1e9) if precise is not None else ticks
        total += (m.cutime + m.cstime) / TICKS
    return total


def boot_time() -> float:
    """Seconds since the epoch when the host booted (to turn ticks into times)."""
    with open("/proc/stat") as handle:
        for line in handle:
            if line.startswith("btime "):
                return float(line.split()[1])
    return 0.0
