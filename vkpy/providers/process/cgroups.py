"""Memory limits and accounting with Linux control groups, when the host lets us.

A container's memory limit is enforced by the kernel when vkpy can make cgroups: the
supervisor makes one cgroup per container run under a parent found at start (or
configured), writes the limit (`memory.max` on cgroup v2, `memory.limit_in_bytes` on
the v1 memory hierarchy), and puts the container's process in it before it executes.
The kernel's OOM killer then kills it, and the cgroup's `oom_kill` counter tells the
supervisor that it was OOMKilled. The same cgroup gives memory usage, working set
and (v2) CPU time for stats, and lets every process of the container be killed at
once. Where no cgroup can be made (no write access, v2 without a delegated subtree),
the backend falls back to the supervisor's watchdog (see supervisor.py).

Standard library only: the supervisor imports it.
"""

from __future__ import annotations

import contextlib
import errno
import os
import signal
import time
from dataclasses import dataclass
from pathlib import Path

V2 = 2
V1 = 1


@dataclass(frozen=True)
class CgroupParent:
    """Where per-container cgroups are made, and on which hierarchy."""

    path: Path
    version: int


@dataclass(frozen=True)
class MemoryUsage:
    usage: int
    working_set: int
    rss: int


def _mounts() -> list[tuple[str, str, str]]:
    """(mount point, fs type, super options) of cgroup mounts, from mountinfo."""
    out = []
    try:
        with open("/proc/self/mountinfo") as handle:
            for line in handle:
                left, _, right = line.partition(" - ")
                parts = left.split()
                fs = right.split()
                if len(parts) > 4 and len(fs) >= 3 and fs[0] in ("cgroup", "cgroup2"):
                    out.append((parts[4], fs[0], fs[2]))
    except OSError:
        return []
    return out


def _own_paths() -> dict[str, str]:
    """This process's cgroup per hierarchy: "" for v2, controller names for v1."""
    out: dict[str, str] = {}
    try:
        with open("/proc/self/cgroup") as handle:
            for line in handle:
                _, controllers, path = line.rstrip("\n").split(":", 2)
                out[controllers] = path
    except (OSError, ValueError):
        return {}
    return out


def version_of(path: Path) -> int:
    return V2 if (path / "cgroup.controllers").exists() else V1


def _writable_v2(parent: Path) -> bool:
    """Whether memory can be limited in children of `parent` (cgroup v2)."""
    try:
        enabled = (parent / "cgroup.subtree_control").read_text().split()
        if "memory" in enabled:
            return os.access(parent, os.W_OK)
        if "memory" not in (parent / "cgroup.controllers").read_text().split():
            return False
        (parent / "cgroup.subtree_control").write_text("+memory")
        return True
    except OSError:
        return False


def _writable_v1(parent: Path) -> bool:
    try:
        parent.mkdir(parents=True, exist_ok=True)
        probe = parent / f"vkpy-probe-{os.getpid()}"
        probe.mkdir(exist_ok=True)
        ok = (probe / "memory.limit_in_bytes").exists()
        probe.rmdir()
        return ok
    except OSError:
        return False


def detect(configured: str | None) -> CgroupParent | None:
    """A parent for container cgroups: the configured one, else one next to vkpy's own
    (cgroup v2 first, then the v1 memory hierarchy); None when memory cannot be limited."""
    if configured:
        path = Path(configured)
        with contextlib.suppress(OSError):
            path.mkdir(parents=True, exist_ok=True)
        version = version_of(path)
        ok = _writable_v2(path) if version == V2 else _writable_v1(path)
        return CgroupParent(path, version) if ok else None
    own = _own_paths()
    for mount, fs, _ in _mounts():
        if fs == "cgroup2" and "" in own:
            parent = Path(mount + own[""])
            if _writable_v2(parent):
                return CgroupParent(parent, V2)
    for mount, fs, options in _mounts():
        if fs == "cgroup" and "memory" in options.split(","):
            relative = next((p for c, p in own.items() if "memory" in c.split(",")), None)
            if relative is None:
                continue
            parent = Path(mount + relative.rstrip("/")) / "vkpy"
            if _writable_v1(parent):
                return CgroupParent(parent, V1)
    return None


def create(parent: Path, name: str, memory_limit: int | None) -> Path:
    """Make the container's cgroup and set its memory limit; returns its directory."""
    path = parent / name
    path.mkdir(exist_ok=True)
    if memory_limit is not None:
        if version_of(parent) == V2:
            (path / "memory.max").write_text(str(memory_limit))
            with contextlib.suppress(OSError):
                (path / "memory.swap.max").write_text("0")
        else:
            (path / "memory.limit_in_bytes").write_text(str(memory_limit))
            with contextlib.suppress(OSError):
                (path / "memory.memsw.limit_in_bytes").write_text(str(memory_limit))
    return path


def join(path: Path, pid: int = 0) -> None:
    """Move a process (0: the calling one) into the cgroup."""
    with open(path / "cgroup.procs", "w") as handle:
        handle.write(str(pid or os.getpid()))


def members(path: Path) -> list[int]:
    try:
        return [int(p) for p in (path / "cgroup.procs").read_text().split()]
    except (OSError, ValueError):
        return []


def oom_kills(path: Path) -> int:
    """How many processes the kernel's OOM killer killed in this cgroup."""
    name = "memory.events" if version_of(path) == V2 else "memory.oom_control"
    try:
        for line in (path / name).read_text().splitlines():
            key, _, value = line.partition(" ")
            if key == "oom_kill":
                return int(value)
    except (OSError, ValueError):
        pass
    return 0


def _stat_file(path: Path) -> dict[str, int]:
    out = {}
    with contextlib.suppress(OSError):
        for line in (path / "memory.stat").read_text().splitlines():
            key, _, value = line.partition(" ")
            with contextlib.suppress(ValueError):
                out[key] = int(value)
    return out


def memory(path: Path) -> MemoryUsage | None:
    """Usage, working set (usage minus inactive file cache, as cAdvisor) and rss."""
    v2 = version_of(path) == V2
    try:
        usage = int((path / ("memory.current" if v2 else "memory.usage_in_bytes")).read_text())
    except (OSError, ValueError):
        return None
    stats = _stat_file(path)
    inactive = stats.get("inactive_file" if v2 else "total_inactive_file", 0)
    rss = stats.get("anon" if v2 else "total_rss", 0)
    return MemoryUsage(usage, max(0, usage - inactive), rss)


def cpu_seconds(path: Path) -> float | None:
    """Cumulative CPU time (cgroup v2 only; v1 keeps it in another hierarchy)."""
    if version_of(path) != V2:
        return None
    with contextlib.suppress(OSError, ValueError):
        for line in (path / "cpu.stat").read_text().splitlines():
            key, _, value = line.partition(" ")
            if key == "usage_usec":
                return int(value) / 1e6
    return None


def kill_all(path: Path) -> None:
    """SIGKILL every process in the cgroup."""
    if version_of(path) == V2:
        with contextlib.suppress(OSError):
            (path / "cgroup.kill").write_text("1")
            return
    for pid in members(path):
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, signal.SIGKILL)


def remove(path: Path, timeout: float = 2.0) -> None:
    """Kill what is left and remove the cgroup (it must be empty to go)."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            path.rmdir()
            return
        except FileNotFoundError:
            return
        except OSError as error:
            if error.errno != errno.EBUSY or time.monotonic() > deadline:
                return
        kill_all(path)
        time.sleep(0.05)
