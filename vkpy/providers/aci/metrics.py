"""`/stats/summary` and `/metrics/resource` (so `kubectl top`) from Azure Monitor.

ACI publishes CpuUsage (millicores, averaged per minute) and MemoryUsage (bytes) per
container through Azure Monitor; azure-mgmt-monitor reads them, one call per running
group. The kubelet API wants cumulative CPU time, so the averages are integrated over
time per container. Samples are kept for `MIN_AGE` seconds (the metrics have a
one-minute grain), so frequent scrapes cost ARM nothing more; between two readings the
counter goes on at the last rate read, so every scrape (metrics-server's come every
10-60 s) sees it move at the rate Azure Monitor reports, rather than flat for
`MIN_AGE` and then a jump, which metrics-server would show as 0 and then a spike.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta

from vkpy.providers.aci.clients import AzureClients, provider_error
from vkpy.providers.aci.config import AciConfig
from vkpy.providers.aci.records import GroupRecord
from vkpy.providers.base import ContainerStats, PodRef, PodStats
from vkpy.providers.errors import ProviderError

log = logging.getLogger(__name__)
MIN_AGE = 30.0


@dataclass
class _Container:
    cpu_seconds: float = 0.0
    """CPU time integrated up to `sampled_at`."""
    last_cpu_millicores: float = 0.0
    memory: int = 0
    sampled_at: float | None = None

    def cpu_at(self, now: float) -> float:
        """Cumulative CPU time at `now`, at the last rate read since `sampled_at`."""
        if self.sampled_at is None:
            return self.cpu_seconds
        return self.cpu_seconds + self.last_cpu_millicores / 1000 * max(0.0, now - self.sampled_at)


@dataclass
class _Pod:
    containers: dict[str, _Container] = field(default_factory=dict)
    fetched_at: float = 0.0
    fetched: bool = False
    started: datetime | None = None

    def stats(self, ref: PodRef, now: float) -> PodStats:
        started = self.started or datetime.now(UTC)
        return PodStats(
            ref=ref,
            start_time=started,
            containers=tuple(
                ContainerStats(
                    name=name,
                    start_time=started,
                    cpu_usage_core_seconds=c.cpu_at(now),
                    memory_working_set_bytes=c.memory,
                    memory_usage_bytes=c.memory,
                )
                for name, c in sorted(self.containers.items())
            ),
        )


def group_id(config: AciConfig, group: str) -> str:
    return (
        f"/subscriptions/{config.subscription_id}/resourceGroups/{config.resource_group}"
        f"/providers/Microsoft.ContainerInstance/containerGroups/{group}"
    )


class StatsCache:
    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._pods: dict[str, _Pod] = {}
        self._clock = clock

    def forget(self, ref: PodRef) -> None:
        self._pods.pop(ref.uid, None)

    async def sample(
        self, clients: AzureClients, config: AciConfig, records: Sequence[GroupRecord]
    ) -> list[PodStats]:
        now = self._clock()
        out: list[PodStats] = []

        async def one(record: GroupRecord) -> None:
            pod = self._pods.setdefault(record.ref.uid, _Pod())
            if not pod.fetched or now - pod.fetched_at >= MIN_AGE:
                try:
                    await self._fetch(clients, config, record, pod, now)
                except ProviderError as error:
                    log.warning(
                        "reading metrics failed",
                        extra={"pod": str(record.ref), "error": str(error)},
                    )
            if pod.fetched:
                out.append(pod.stats(record.ref, now))

        await asyncio.gather(*(one(r) for r in records))
        return out

    async def _fetch(
        self, clients: AzureClients, config: AciConfig, record: GroupRecord, pod: _Pod, now: float
    ) -> None:
        end = datetime.now(UTC)
        span = f"{(end - timedelta(minutes=5)).isoformat()}/{end.isoformat()}"
        try:
            answer = await clients.monitor.metrics.list(
                group_id(config, record.name),
                timespan=span,
                interval="PT1M",
                metricnames="CpuUsage,MemoryUsage",
                aggregation="Average",
                filter="containerName eq '*'",
            )
        except Exception as error:
            raise provider_error(error, f"reading metrics of {record.name}") from error
        for metric in answer.value or []:
            name = metric.name.value if metric.name is not None else ""
            for series in metric.timeseries or []:
                container = next(
                    (
                        str(v.value)
                        for v in series.metadatavalues or []
                        if v.name is not None and str(v.name.value).lower() == "containername"
                    ),
                    None,
                )
                points = [p.average for p in series.data or [] if p.average is not None]
                if container is None or not points:
                    continue
                state = pod.containers.setdefault(container, _Container())
                if name == "CpuUsage":
                    state.cpu_seconds = state.cpu_at(now)
                    state.last_cpu_millicores = float(points[-1])
                    state.sampled_at = now
                elif name == "MemoryUsage":
                    state.memory = int(points[-1])
        pod.started = (record.state.started_at if record.state else None) or end
        pod.fetched_at = now
        pod.fetched = True
