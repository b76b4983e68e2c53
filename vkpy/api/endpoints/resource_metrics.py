"""`/metrics/resource`: the Prometheus text metrics-server scrapes for `kubectl top`.

The series and help texts are the kubelet's resource metrics collector's: node and
container CPU counters and working sets, container start times, pod sums, and
`resource_scrape_error` (1 when the backend could not be sampled, and then nothing
else, as the kubelet does). Every usage sample carries the time it was taken (ms),
which metrics-server uses to compute rates; CPU counters come from the Summary, whose
node counter never goes down. metrics-server drops a node whose CPU or memory is zero
and a pod with any zero container value, so those values matter.

Written by hand rather than through prometheus-client's registry: the samples are
per-scrape values with explicit timestamps, which its collectors do not express.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping

from vkpy.core.objects import KubeObject

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"

_HELP = {
    "container_cpu_usage_seconds_total": (
        "counter",
        "Cumulative cpu time consumed by the container in core-seconds",
    ),
    "container_memory_working_set_bytes": (
        "gauge",
        "Current working set of the container in bytes",
    ),
    "container_start_time_seconds": (
        "gauge",
        "Start time of the container since unix epoch in seconds",
    ),
    "node_cpu_usage_seconds_total": (
        "counter",
        "Cumulative cpu time consumed by the node in core-seconds",
    ),
    "node_memory_working_set_bytes": ("gauge", "Current working set of the node in bytes"),
    "pod_cpu_usage_seconds_total": (
        "counter",
        "Cumulative cpu time consumed by the pod in core-seconds",
    ),
    "pod_memory_working_set_bytes": ("gauge", "Current working set of the pod in bytes"),
    "resource_scrape_error": (
        "gauge",
        "1 if there was an error while getting container metrics, 0 otherwise",
    ),
}


def _escape(value: str) -> str:
    return value.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


def _labels(**labels: str) -> str:
    inner = ",".join(f'{k}="{_escape(v)}"' for k, v in sorted(labels.items()))
    return "{" + inner + "}"


def _number(value: float) -> str:
    if float(value).is_integer() and abs(value) < 1e15:
        return str(int(value))
    return repr(float(value))


StartTimes = Mapping[tuple[str, str, str], float]
"""(namespace, pod, container) -> the container's start, Unix seconds (sub-second)."""


def _samples(
    summary: KubeObject, stamp_ms: int, starts: StartTimes
) -> Iterator[tuple[str, str, float, int | None]]:
    """(name, labels, value, timestamp ms or None) for every series."""
    node = summary.get("node") or {}
    cpu = node.get("cpu") or {}
    memory = node.get("memory") or {}
    if "usageCoreNanoSeconds" in cpu:
        yield "node_cpu_usage_seconds_total", "", cpu["usageCoreNanoSeconds"] / 1e9, stamp_ms
    if "workingSetBytes" in memory:
        yield "node_memory_working_set_bytes", "", memory["workingSetBytes"], stamp_ms
    for pod in summary.get("pods") or ():
        ref = pod["podRef"]
        for c in pod.get("containers") or ():
            labels = _labels(container=c["name"], pod=ref["name"], namespace=ref["namespace"])
            start = starts.get((ref["namespace"], ref["name"], c["name"]))
            if start:
                yield "container_start_time_seconds", labels, start, None
            c_cpu = c.get("cpu") or {}
            if "usageCoreNanoSeconds" in c_cpu:
                seconds = c_cpu["usageCoreNanoSeconds"] / 1e9
                yield "container_cpu_usage_seconds_total", labels, seconds, stamp_ms
            c_memory = c.get("memory") or {}
            if "workingSetBytes" in c_memory:
                working_set = c_memory["workingSetBytes"]
                yield "container_memory_working_set_bytes", labels, working_set, stamp_ms
        labels = _labels(pod=ref["name"], namespace=ref["namespace"])
        p_cpu = pod.get("cpu") or {}
        if "usageCoreNanoSeconds" in p_cpu:
            seconds = p_cpu["usageCoreNanoSeconds"] / 1e9
            yield "pod_cpu_usage_seconds_total", labels, seconds, stamp_ms
        p_memory = pod.get("memory") or {}
        if "workingSetBytes" in p_memory:
            yield "pod_memory_working_set_bytes", labels, p_memory["workingSetBytes"], stamp_ms


def render(summary: KubeObject | None, stamp_ms: int, starts: StartTimes | None = None) -> str:
    """The exposition text; `summary` None means the backend could not be sampled."""
    by_name: dict[str, list[str]] = {name: [] for name in _HELP}
    if summary is not None:
        for name, labels, value, stamp in _samples(summary, stamp_ms, starts or {}):
            tail = f" {stamp}" if stamp is not None else ""
            by_name[name].append(f"{name}{labels} {_number(value)}{tail}\n")
    by_name["resource_scrape_error"].append(
        f"resource_scrape_error {0 if summary is not None else 1}\n"
    )
    out: list[str] = []
    for name in sorted(by_name):
        lines = by_name[name]
        if not lines:
            continue
        kind, text = _HELP[name]
        out.append(f"# HELP {name} [STABLE] {text}\n# TYPE {name} {kind}\n")
        out.extend(lines)
    return "".join(out)
