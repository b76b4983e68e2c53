"""Give vkpy CPUs of its own for a benchmark, as a Deployment's CPU request would.

On the 2-core bench machine the control plane carrying 100 pods/s of churn keeps
both cores busy (load average 6), and vkpy's event loop waits for a CPU more than it
works: its request latencies then measure the machine's queue, not vkpy. In a
cluster vkpy runs in a pod of its own, with its own CPU, apart from the API server.
`split(vkpy_pid, cpus)` models that: vkpy's threads run on `cpus` and every other
process this benchmark started (the control plane, the timing clients, the bench
itself) on the remaining CPUs. Nothing outside the benchmark's own process tree is
touched. Linux only (sched_setaffinity per thread).
"""

from __future__ import annotations

import contextlib
import os
from pathlib import Path

from vkpy.providers.process import proc

PROC = Path("/proc")


def parse_cpus(text: str) -> set[int]:
    """`"1"`, `"0,2"` or `"2-3"` as a set of CPU numbers."""
    out: set[int] = set()
    for part in text.split(","):
        low, _, high = part.strip().partition("-")
        out.update(range(int(low), int(high or low) + 1))
    return out


def tree(root: int) -> set[int]:
    """`root` and every process below it."""
    children: dict[int, list[int]] = {}
    for info in proc.every():
        children.setdefault(info.ppid, []).append(info.pid)
    out, todo = set(), [root]
    while todo:
        pid = todo.pop()
        if pid not in out:
            out.add(pid)
            todo.extend(children.get(pid, []))
    return out


def pin(pid: int, cpus: set[int]) -> None:
    """Every thread of `pid` on `cpus` (threads started later inherit it)."""
    with contextlib.suppress(FileNotFoundError):
        for tid in os.listdir(PROC / str(pid) / "task"):
            with contextlib.suppress(ProcessLookupError):
                os.sched_setaffinity(int(tid), cpus)


def split(vkpy_pid: int, cpus: set[int]) -> str:
    """vkpy (and what it started) on `cpus`; the rest of this process's tree on the
    other CPUs. Returns a line saying so, for the report."""
    every = os.sched_getaffinity(0)
    rest = every - cpus
    if not cpus <= every or not rest:
        raise SystemExit(f"--vkpy-cpus {sorted(cpus)}: leave at least one of {sorted(every)}")
    ours = tree(vkpy_pid)
    others = tree(os.getpid()) - ours
    for pid in ours:
        pin(pid, cpus)
    for pid in others:
        pin(pid, rest)
    return (
        f"vkpy on CPU {','.join(map(str, sorted(cpus)))}; the control plane, the timing "
        f"clients and the bench ({len(others)} processes) on CPU "
        f"{','.join(map(str, sorted(rest)))}"
    )
