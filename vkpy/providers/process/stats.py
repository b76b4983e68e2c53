"""CPU and memory samples of running containers, for /stats/summary and `kubectl top`.

A container in a cgroup is measured by its cgroup: memory usage, working set (usage
minus inactive file cache, as cAdvisor computes it) and anonymous memory as rss, and
on cgroup v2 its CPU time. Otherwise its processes are found by session in /proc (one
scan per sample for all containers) and their resident memory and CPU time (including
waited-for children) are added up. CPU time must never go down for one container
run, so the sampler keeps the highest figure it reported per run.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable
from pathlib import Path

from vkpy.providers.base import ContainerStats, PodStats
from vkpy.providers.process import cgroups, proc
from vkpy.providers.process.phase import at
from vkpy.providers.process.pod import PodRuntime
from vkpy.providers.process.records import RunRecord


def _sessions() -> dict[int, list[proc.ProcStat]]:
    out: dict[int, list[proc.ProcStat]] = defaultdict(list)
    for name in Path("/proc").iterdir():
        if name.name.isdigit():
            info = proc.stat(int(name.name))
            if info is not None and info.state not in ("Z", "X"):
                out[info.session].append(info)
    return out


class Sampler:
    def __init__(self) -> None:
        self._cpu: dict[tuple[int, int], float] = {}

    def _container(
        self, run: RunRecord, sessions: dict[int, list[proc.ProcStat]] | None
    ) -> tuple[float, cgroups.MemoryUsage] | None:
        group = Path(run.cgroup) if run.cgroup else None
        memory = cgroups.memory(group) if group else None
        cpu = cgroups.cpu_seconds(group) if group else None
        if memory is None or cpu is None:
            members = (sessions or {}).get(run.pid, [])
            if not members:
                return None
            if cpu is None:
                cpu = proc.cpu_seconds(members)
            if memory is None:
                rss = proc.rss_bytes(members)
                memory = cgroups.MemoryUsage(rss, rss, rss)
        key = (run.pid, run.pid_start)
        cpu = max(cpu, self._cpu.get(key, 0.0))
        self._cpu[key] = cpu
        return cpu, memory

    def sample(self, pods: Iterable[PodRuntime]) -> list[PodStats]:
        """One sample of every running container (blocking: call it in a thread)."""
        running = [
            (pod, [(c.config.name, c.run_record) for c in pod.containers if c.supervised])
            for pod in pods
        ]
        needs_proc = any(
            run is not None and (not run.cgroup or not _has_cpu(run.cgroup))
            for _, containers in running
            for _, run in containers
        )
        sessions = _sessions() if needs_proc else None
        out = []
        live: set[tuple[int, int]] = set()
        for pod, containers in running:
            stats = []
            for name, run in containers:
                if run is None:
                    continue
                measured = self._container(run, sessions)
                if measured is None:
                    continue
                live.add((run.pid, run.pid_start))
                cpu, memory = measured
                stats.append(
                    ContainerStats(
                        name=name,
                        start_time=at(run.started_ns),  # type: ignore[arg-type]
                        cpu_usage_core_seconds=cpu,
                        memory_working_set_bytes=memory.working_set,
                        memory_usage_bytes=memory.usage,
                        memory_rss_bytes=memory.rss,
                    )
                )
            if stats:
                started = at(int(pod.created * 1e9)) or stats[0].start_time
                out.append(PodStats(ref=pod.ref, start_time=started, containers=tuple(stats)))
        self._cpu = {k: v for k, v in self._cpu.items() if k in live}
        return out


def _has_cpu(cgroup: str) -> bool:
    return cgroups.version_of(Path(cgroup)) == cgroups.V2
