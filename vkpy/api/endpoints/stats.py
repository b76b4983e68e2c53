"""`/stats/summary`: the backend's CPU and memory samples as a stats/v1alpha1 Summary.

metrics-server, `kubectl top` and `kubectl get --raw .../proxy/stats/summary` read
this. A backend gives cumulative CPU time and memory per running container
(`StatsProvider.pod_stats`); this module adds what the Summary needs on top:

- rates: `usageNanoCores` from the previous sample of the same container instance
  (kept at least `RATE_WINDOW` seconds old so two quick scrapes do not give noise),
  or the average since the container started when there is none;
- the node: vkpy's own process (the `kubelet` system container) plus every pod. Its
  CPU counter must never go down although pods come and go, so the last value of a
  container instance that disappeared is kept in a retired total;
- times in the API's format, and pods the API server does not know left out.
"""

from __future__ import annotations

import resource
import time
from collections import OrderedDict
from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass
from datetime import datetime

from vkpy.core.objects import KubeObject
from vkpy.core.rfc3339 import format_time
from vkpy.providers.base import ContainerStats, PodStats

RATE_WINDOW = 5.0
_RETIRED_MAX = 20_000
_PAGE = 4096


@dataclass(frozen=True)
class OwnUsage:
    """vkpy's own process: cumulative CPU seconds and resident memory."""

    cpu_seconds: float
    rss_bytes: int


def own_usage() -> OwnUsage:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    rss = usage.ru_maxrss * 1024
    try:
        with open("/proc/self/statm", "rb") as statm:
            rss = int(statm.read().split()[1]) * _PAGE
    except (OSError, ValueError, IndexError):
        pass
    return OwnUsage(usage.ru_utime + usage.ru_stime, rss)


def api_time(moment: datetime | float) -> str:
    """metav1.Time as JSON: RFC 3339 in UTC, whole seconds."""
    return format_time(moment)


_Key = tuple[str, str, float]
"""(pod uid, container name, start time): one container instance."""


class StatsSampler:
    """Builds Summaries; remembers earlier samples for rates and the node's counter."""

    def __init__(
        self,
        node_name: str,
        start_time: float | None = None,
        clock: Callable[[], float] = time.time,
        own: Callable[[], OwnUsage] = own_usage,
    ) -> None:
        self.node_name = node_name
        self.start_time = start_time if start_time is not None else clock()
        self._clock = clock
        self._own = own
        self._previous: dict[_Key, tuple[float, float]] = {}
        self._last: dict[_Key, float] = {}
        self._retired: OrderedDict[_Key, float] = OrderedDict()
        self._retired_total = 0.0
        self._node_previous: tuple[float, float] | None = None
        self._times: dict[datetime, str] = {}

    def _time(self, moment: datetime) -> str:
        """api_time, remembered: start times repeat in every sample."""
        text = self._times.get(moment)
        if text is None:
            if len(self._times) > _RETIRED_MAX:
                self._times.clear()
            text = self._times[moment] = api_time(moment)
        return text

    def _rate(self, key: _Key, cpu: float, now: float, started: float) -> float:
        """Cores in use, from the sample kept for this instance."""
        previous = self._previous.get(key)
        if previous is None:
            self._previous[key] = (now, cpu)
            elapsed = now - started
            return cpu / elapsed if elapsed > 0 else 0.0
        then, before = previous
        if now - then >= RATE_WINDOW:
            self._previous[key] = (now, cpu)
        elapsed = now - then
        return max(0.0, cpu - before) / elapsed if elapsed > 0 else 0.0

    def _account(self, current: dict[_Key, float]) -> float:
        """The node's cumulative CPU of pods, never decreasing."""
        for key in self._last.keys() - current.keys():
            self._retired[key] = self._last[key]
            self._retired_total += self._last[key]
            self._previous.pop(key, None)
        while len(self._retired) > _RETIRED_MAX:
            self._retired.popitem(last=False)
        for key in current.keys() & self._retired.keys():
            self._retired_total -= self._retired.pop(key)
        for key, value in current.items():
            current[key] = max(value, self._last.get(key, 0.0))
        self._last = current
        return self._retired_total + sum(current.values())

    def summary(
        self,
        pods: Sequence[PodStats],
        known_uids: Collection[str] | None = None,
        now: float | None = None,
    ) -> KubeObject:
        """The Summary for these samples (only pods in `known_uids`, when given),
        taken at `now` (default: the clock)."""
        now = self._clock() if now is None else now
        stamp = api_time(now)
        current: dict[_Key, float] = {}
        out_pods: list[KubeObject] = []
        total_memory = 0
        total_usage = 0
        total_rss = 0
        for pod in pods:
            if known_uids is not None and pod.ref.uid not in known_uids:
                continue
            containers: list[KubeObject] = []
            pod_cpu = pod_rate = 0.0
            pod_ws = pod_usage = pod_rss = 0
            for c in pod.containers:
                started = c.start_time.timestamp()
                key = (pod.ref.uid, c.name, started)
                current[key] = c.cpu_usage_core_seconds
                rate = self._rate(key, c.cpu_usage_core_seconds, now, started)
                containers.append(
                    {
                        "name": c.name,
                        "startTime": self._time(c.start_time),
                        "cpu": _cpu(stamp, rate, c.cpu_usage_core_seconds),
                        "memory": _memory(stamp, c),
                    }
                )
                pod_cpu += c.cpu_usage_core_seconds
                pod_rate += rate
                pod_ws += c.memory_working_set_bytes
                pod_usage += c.memory_usage_bytes
                pod_rss += c.memory_rss_bytes
            total_memory += pod_ws
            total_usage += pod_usage
            total_rss += pod_rss
            out_pods.append(
                {
                    "podRef": {
                        "name": pod.ref.name,
                        "namespace": pod.ref.namespace,
                        "uid": pod.ref.uid,
                    },
                    "startTime": self._time(pod.start_time),
                    "containers": containers,
                    "cpu": _cpu(stamp, pod_rate, pod_cpu),
                    "memory": {
                        "time": stamp,
                        "workingSetBytes": pod_ws,
                        "usageBytes": pod_usage,
                        "rssBytes": pod_rss,
                    },
                }
            )
        own = self._own()
        node_cpu = self._account(current) + own.cpu_seconds
        node_rate = self._node_rate(node_cpu, now)
        own_rate = own.cpu_seconds / max(now - self.start_time, 1e-9)
        node: KubeObject = {
            "nodeName": self.node_name,
            "systemContainers": [
                {
                    "name": "kubelet",
                    "startTime": api_time(self.start_time),
                    "cpu": _cpu(stamp, own_rate, own.cpu_seconds),
                    "memory": {
                        "time": stamp,
                        "workingSetBytes": own.rss_bytes,
                        "usageBytes": own.rss_bytes,
                        "rssBytes": own.rss_bytes,
                    },
                }
            ],
            "startTime": api_time(self.start_time),
            "cpu": _cpu(stamp, node_rate, node_cpu),
            "memory": {
                "time": stamp,
                "workingSetBytes": total_memory + own.rss_bytes,
                "usageBytes": total_usage + own.rss_bytes,
                "rssBytes": total_rss + own.rss_bytes,
            },
        }
        return {"node": node, "pods": out_pods}

    def _node_rate(self, cpu: float, now: float) -> float:
        previous = self._node_previous
        if previous is None or now - previous[0] >= RATE_WINDOW:
            self._node_previous = (now, cpu)
        if previous is None:
            elapsed = now - self.start_time
            return cpu / elapsed if elapsed > 0 else 0.0
        elapsed = now - previous[0]
        return max(0.0, cpu - previous[1]) / elapsed if elapsed > 0 else 0.0


def _cpu(stamp: str, cores: float, seconds: float) -> KubeObject:
    return {
        "time": stamp,
        "usageNanoCores": round(cores * 1e9),
        "usageCoreNanoSeconds": round(seconds * 1e9),
    }


def _memory(stamp: str, c: ContainerStats) -> KubeObject:
    return {
        "time": stamp,
        "workingSetBytes": c.memory_working_set_bytes,
        "usageBytes": c.memory_usage_bytes,
        "rssBytes": c.memory_rss_bytes,
    }
