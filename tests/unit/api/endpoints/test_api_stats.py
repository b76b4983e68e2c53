"""The stats/v1alpha1 Summary and /metrics/resource built from backend samples."""

from __future__ import annotations

from datetime import UTC, datetime

from prometheus_client.parser import text_string_to_metric_families

from vkpy.api.endpoints import resource_metrics
from vkpy.api.endpoints.stats import OwnUsage, StatsSampler, api_time
from vkpy.providers.base import ContainerStats, PodRef, PodStats

T0 = 1_800_000_000.0


class Clock:
    def __init__(self) -> None:
        self.now = T0

    def __call__(self) -> float:
        return self.now


def pod(name: str, cpu: dict[str, float], started: float = T0 - 100) -> PodStats:
    return PodStats(
        ref=PodRef("ns", name, f"uid-{name}"),
        start_time=datetime.fromtimestamp(started, UTC),
        containers=tuple(
            ContainerStats(
                name=c,
                start_time=datetime.fromtimestamp(started, UTC),
                cpu_usage_core_seconds=seconds,
                memory_working_set_bytes=1000,
                memory_usage_bytes=1500,
                memory_rss_bytes=800,
            )
            for c, seconds in cpu.items()
        ),
    )


def sampler(clock: Clock) -> StatsSampler:
    return StatsSampler("node-1", start_time=T0 - 1000, clock=clock, own=lambda: OwnUsage(2.0, 50))


def test_summary_has_the_stats_v1alpha1_shape() -> None:
    clock = Clock()
    summary = sampler(clock).summary([pod("a", {"app": 10.0, "side": 5.0})])
    node = summary["node"]
    assert node["nodeName"] == "node-1"
    assert node["startTime"] == api_time(T0 - 1000)
    assert node["cpu"]["usageCoreNanoSeconds"] == 17 * 10**9  # pods + vkpy itself
    assert node["memory"]["workingSetBytes"] == 2050
    assert node["systemContainers"][0]["name"] == "kubelet"
    (a,) = summary["pods"]
    assert a["podRef"] == {"name": "a", "namespace": "ns", "uid": "uid-a"}
    assert [c["name"] for c in a["containers"]] == ["app", "side"]
    app = a["containers"][0]
    assert app["cpu"] == {
        "time": api_time(T0),
        "usageNanoCores": 10**8,  # 10 s over 100 s of life: 0.1 core on average
        "usageCoreNanoSeconds": 10 * 10**9,
    }
    assert app["memory"] == {
        "time": api_time(T0),
        "workingSetBytes": 1000,
        "usageBytes": 1500,
        "rssBytes": 800,
    }
    assert a["cpu"]["usageCoreNanoSeconds"] == 15 * 10**9
    assert a["memory"]["workingSetBytes"] == 2000


def test_rates_come_from_the_previous_sample() -> None:
    clock = Clock()
    stats = sampler(clock)
    stats.summary([pod("a", {"app": 10.0})])
    clock.now += 10
    summary = stats.summary([pod("a", {"app": 15.0})])
    assert summary["pods"][0]["containers"][0]["cpu"]["usageNanoCores"] == 5 * 10**8


def test_node_cpu_never_goes_down_when_pods_go_or_restart() -> None:
    clock = Clock()
    stats = sampler(clock)
    seen = []
    samples = [
        [pod("a", {"app": 10.0}), pod("b", {"app": 20.0})],
        [pod("b", {"app": 21.0})],  # a is gone
        [pod("b", {"app": 1.0}, started=T0 + 5)],  # b restarted: counter reset
        [pod("b", {"app": 2.0}, started=T0 + 5), pod("a", {"app": 11.0})],  # a back
    ]
    for batch in samples:
        clock.now += 10
        seen.append(stats.summary(batch)["node"]["cpu"]["usageCoreNanoSeconds"])
    assert seen == sorted(seen)
    assert seen[1] == (10 + 21 + 2) * 10**9


def test_unknown_pods_are_left_out() -> None:
    summary = sampler(Clock()).summary([pod("a", {"app": 1.0}), pod("b", {"app": 1.0})], {"uid-b"})
    assert [p["podRef"]["name"] for p in summary["pods"]] == ["b"]


def test_resource_metrics_are_what_metrics_server_reads() -> None:
    clock = Clock()
    samples = [pod("a", {"app": 10.0, "side": 5.0})]
    summary = sampler(clock).summary(samples)
    starts = {("ns", "a", c): T0 - 99.5 for c in ("app", "side")}
    text = resource_metrics.render(summary, int(T0 * 1000), starts)
    families = {f.name: f for f in text_string_to_metric_families(text)}
    assert set(families) == {
        "node_cpu_usage_seconds",
        "node_memory_working_set_bytes",
        "container_cpu_usage_seconds",
        "container_memory_working_set_bytes",
        "container_start_time_seconds",
        "pod_cpu_usage_seconds",
        "pod_memory_working_set_bytes",
        "resource_scrape_error",
    }
    cpu = {s.labels["container"]: s for s in families["container_cpu_usage_seconds"].samples}
    assert cpu["app"].labels == {"container": "app", "pod": "a", "namespace": "ns"}
    assert cpu["app"].value == 10.0
    assert cpu["app"].timestamp == T0
    (node_cpu,) = families["node_cpu_usage_seconds"].samples
    assert node_cpu.value == 17.0
    start = families["container_start_time_seconds"].samples[0]
    assert start.value == T0 - 99.5
    assert start.timestamp is None
    assert families["resource_scrape_error"].samples[0].value == 0
    assert "# HELP node_cpu_usage_seconds_total [STABLE] Cumulative cpu time" in text


def test_resource_metrics_report_a_failed_scrape_and_escape_labels() -> None:
    text = resource_metrics.render(None, 0)
    assert text.endswith("resource_scrape_error 1\n")
    assert "node_cpu" not in text
    summary = sampler(Clock()).summary([pod('we"ird\\', {"app": 1.0})])
    families = {
        f.name: f for f in text_string_to_metric_families(resource_metrics.render(summary, 1))
    }
    assert families["pod_cpu_usage_seconds"].samples[0].labels["pod"] == 'we"ird\\'
