"""`python -m vkpy.devcluster demo hybrid` (`make demo`): the burst scenario, watched live.

A reader of docs/hybrid-node-pools.md should be able to see, on their own machine,
what the text claims: the regular pool takes the baseline, the HPA scales out under
load, the replicas that do not fit land on the virtual node, and the scale-in removes
those first. This brings up the pools (two workers, the virtual node with
`--pod-deletion-cost`), applies examples/hybrid/burst.yaml, offers load for a while
(load.py), prints one table row every few seconds (replicas per pool, pending pods,
the HPA's CPU and target), and at the end writes the samples as CSV and, when
matplotlib is installed (`pip install 'vkpy[demo]'`), a PNG plot beside it (and the
same as SVG, the form docs/ keeps).
"""

from __future__ import annotations

import csv
import json
import shutil
import time
from dataclasses import astuple, dataclass, fields
from pathlib import Path
from typing import Any

import yaml

from . import nodes
from .access import ClusterAccess
from .cluster import DevCluster
from .load import QueueLoad, new_queue_dir, with_queue

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "hybrid" / "burst.yaml"
NAMESPACE = "hybrid-demo"


@dataclass(frozen=True)
class Sample:
    """One row of the live table."""

    seconds: float
    load_cores: float
    regular: int
    virtual: int
    pending: int
    desired: int
    cpu_percent: int  # the HPA's current average utilization; -1 before it has one
    target_percent: int


def _json(access: ClusterAccess, *args: str) -> dict[str, Any]:
    got = access.run_kubectl(*args, "-o", "json", check=False)
    loaded: dict[str, Any] = json.loads(got.stdout) if got.returncode == 0 else {}
    return loaded


def sample(
    access: ClusterAccess, seconds: float, load: float, namespace: str = NAMESPACE
) -> Sample:
    """One row: the burst Deployment's replicas per pool and its HPA, as read now."""
    pods = _json(access, "get", "pods", "-n", namespace, "-l", "app=burst").get("items", [])
    regular = virtual = pending = 0
    for pod in pods:
        if pod["metadata"].get("deletionTimestamp"):
            continue
        node = pod.get("spec", {}).get("nodeName", "")
        conditions = pod.get("status", {}).get("conditions", [])
        is_ready = any(c["type"] == "Ready" and c["status"] == "True" for c in conditions)
        if not is_ready:
            pending += 1
        elif node == nodes.virtual().name:
            virtual += 1
        else:
            regular += 1
    hpa = _json(access, "get", "hpa", "burst", "-n", namespace)
    status, spec = hpa.get("status", {}), hpa.get("spec", {})
    cpu = -1
    for metric in status.get("currentMetrics") or []:
        cpu = int(metric.get("resource", {}).get("current", {}).get("averageUtilization", -1))
    target = 0
    for metric in spec.get("metrics") or []:
        target = int(metric.get("resource", {}).get("target", {}).get("averageUtilization", 0))
    desired = int(status.get("desiredReplicas", 0))
    return Sample(round(seconds, 1), load, regular, virtual, pending, desired, cpu, target)


HEADER = (
    f"{'t(s)':>6} {'load':>5} {'regular':>7} {'virtual':>7} {'pending':>7} "
    f"{'desired':>7} {'cpu%':>5} {'target%':>7}"
)


def row(s: Sample) -> str:
    cpu = "-" if s.cpu_percent < 0 else str(s.cpu_percent)
    return (
        f"{s.seconds:>6.0f} {s.load_cores:>5.2f} {s.regular:>7} {s.virtual:>7} "
        f"{s.pending:>7} {s.desired:>7} {cpu:>5} {s.target_percent:>7}"
    )


def write_outputs(samples: list[Sample], directory: Path) -> list[Path]:
    """The samples as CSV, and as a PNG (and an SVG, the text form docs embed) when
    matplotlib is there."""
    directory.mkdir(parents=True, exist_ok=True)
    written = [directory / "hybrid-burst.csv"]
    with written[0].open("w", newline="") as f:
        out = csv.writer(f)
        out.writerow([f.name for f in fields(Sample)])
        out.writerows(astuple(s) for s in samples)
    try:
        import matplotlib  # noqa: PLC0415 - an optional extra

        matplotlib.use("Agg")
        matplotlib.rcParams["svg.hashsalt"] = "vkpy"  # the same samples, the same SVG
        import matplotlib.pyplot as plt  # noqa: PLC0415
    except ImportError:
        return written
    t = [s.seconds for s in samples]
    figure, (pods, cpu) = plt.subplots(2, 1, sharex=True, figsize=(8, 6))
    pods.stackplot(
        t,
        [s.regular for s in samples],
        [s.virtual for s in samples],
        [s.pending for s in samples],
        labels=["regular pool", "virtual node", "pending"],
    )
    pods.set_ylabel("replicas")
    pods.legend(loc="upper left")
    cpu.plot(t, [max(s.cpu_percent, 0) for s in samples], label="HPA CPU %")
    cpu.plot(t, [s.target_percent for s in samples], "--", label="target %")
    cpu.plot(t, [s.load_cores * 100 for s in samples], ":", label="offered load (% of a core)")
    cpu.set_xlabel("seconds")
    cpu.legend(loc="upper left")
    figure.tight_layout()
    png = directory / "hybrid-burst.png"
    figure.savefig(png, dpi=100)
    svg = directory / "hybrid-burst.svg"
    figure.savefig(svg, metadata={"Date": None})
    written += [png, svg]
    return written


def run(directory: Path, load_cores: float, load_seconds: float, interval: float = 3.0) -> int:
    cluster = DevCluster(directory)
    cluster.up()
    print("starting metrics-server and the pools (2 workers, vkpy-virtual) ...", flush=True)
    cluster.start_metrics_server()
    # Its jobs run python:3.12-slim as the host's python: host programs on every node.
    pools = [nodes.worker(1), nodes.worker(2), nodes.virtual(pod_deletion_cost=-100)]
    cluster.start_nodes([nodes.host_programs(spec) for spec in pools])
    access = cluster.access()
    access.run_kubectl("create", "namespace", NAMESPACE, check=False)
    queue = new_queue_dir()
    docs = [d for d in yaml.safe_load_all(with_queue(EXAMPLE.read_text(), queue)) if d]
    access.run_kubectl("apply", "-n", NAMESPACE, "-f", "-", input=yaml.safe_dump_all(docs))
    print(f"burst.yaml applied in namespace {NAMESPACE}; ", end="")
    print(f"load {load_cores} cores for {load_seconds:.0f} s, from t=20 s")
    print(HEADER, flush=True)
    samples: list[Sample] = []
    load: QueueLoad | None = None
    began = time.monotonic()
    try:
        while True:
            now = time.monotonic() - began
            if load is None and 20 <= now < 20 + load_seconds:
                load = QueueLoad(queue, load_cores).start()
            if load is not None and now >= 20 + load_seconds:
                load.stop()
                load = None
            current = sample(access, now, load.cores if load else 0.0)
            samples.append(current)
            print(row(current), flush=True)
            scaled_in = current.regular + current.virtual == 2 and current.virtual == 0
            if now > 20 + load_seconds + 30 and scaled_in:
                break
            if now > 20 + load_seconds + 300:
                print("the HPA did not scale back in within 300 s")
                break
            time.sleep(interval)
    except KeyboardInterrupt:
        pass
    finally:
        if load is not None:
            load.stop()
        for path in write_outputs(samples, directory / "demo"):
            print(f"wrote {path}")
        access.run_kubectl("delete", "namespace", NAMESPACE, "--wait=false", check=False)
        shutil.rmtree(queue, ignore_errors=True)
    print("the cluster keeps running; `python -m vkpy.devcluster down` stops it and the pools")
    return 0
