"""vkpy next to its peers on one control plane, same workload, rounds interleaved (issue 17).

The peers: kwok (sigs.k8s.io/kwok, fake nodes driven by Stages, run as kwokctl runs
it, with the Stages its module ships) and Virtual Kubelet's mock provider
(github.com/virtual-kubelet/virtual-kubelet), both built from their pinned Go modules
by `controlplane/build.sh kwok|virtual-kubelet`. Each round starts every system once,
in a rotating order so machine noise hits all alike, on a fresh node of its own:

1. bound: N pods created with spec.nodeName set (32 at a time); time from each
   create to the watch seeing it Running;
2. delete: every pod deleted (default grace), time until all are gone;
3. scheduled (unless --no-scheduled): N pods placed by kube-scheduler (node affinity
   on the node's name), to Running, then deleted again.

Reported per system, medians over rounds, and as ratios to kwok: pods/s, latency
percentiles, the system's CPU per pod (from /proc, steps 1 and 2), peak and settled
RSS, and the API requests per pod by verb during steps 1 and 2 from the API server's
own counters, less the benchmark's own creates and deletes. Beside pods/s, what caps
it on a shared machine: how fast the API server took the benchmark's creates, how long
after the last one the last pod was Running, and the CPU the API server and etcd spent
per pod in steps 1 and 2 (from /proc, when the cluster is a dev cluster whose
state.json is beside its kubeconfig). Appended to
docs/benchmarks.md with the machine, its load, and the versions; `--plots DIR` also
writes the latency CDF and RSS over time there, as SVG and PNG (bench/svgplot.py).

    python bench/peers.py --pods 300 --rounds 3
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import published
from pods import apiserver_requests_by_code, cpu_seconds, free_port, peak_rss_mib, until
from svgplot import cdf_series, write

from vkpy.api.certs.x509 import self_signed
from vkpy.devcluster import ClusterError, DevCluster, given_or_started
from vkpy.devcluster.binaries import tool_dir
from vkpy.kube.client import ApiError, ClientOptions, KubeClient
from vkpy.kube.watch import Watcher, WatchOptions

ROOT = Path(__file__).resolve().parents[1]
SYSTEMS = ("kwok", "vkpy", "virtual-kubelet")
VERBS = ("POST", "PUT", "PATCH", "DELETE", "GET", "LIST", "WATCH")
KWOK_ANNOTATION = "kwok.x-k8s.io/node"


def kwok_node(name: str, labels: dict[str, str] | None = None) -> dict[str, Any]:
    """A Node object for kwok to drive, as `kwokctl scale node` makes them."""
    return {
        "metadata": {
            "name": name,
            "annotations": {KWOK_ANNOTATION: "fake"},
            "labels": {"type": "kwok", "kubernetes.io/hostname": name, **(labels or {})},
        },
        "spec": {"taints": [{"key": KWOK_ANNOTATION, "value": "fake", "effect": "NoSchedule"}]},
    }


def rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


def pod(name: str, node: str, bound: bool) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "restartPolicy": "Never",
        "containers": [{"name": "app", "image": "example.com/app:1"}],
        "tolerations": [{"operator": "Exists"}],
    }
    if bound:
        spec["nodeName"] = node
    else:
        term = {"matchFields": [{"key": "metadata.name", "operator": "In", "values": [node]}]}
        spec["affinity"] = {
            "nodeAffinity": {
                "requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [term]}
            }
        }
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name}, "spec": spec}


@dataclass
class Run:
    """One system's figures in one round."""

    system: str
    pods: int
    running: int = 0
    bound_seconds: float = 0.0
    latencies: list[float] = field(default_factory=list)
    delete_seconds: float = 0.0
    scheduled_seconds: float | None = None
    scheduled_latencies: list[float] = field(default_factory=list)
    cpu_seconds: float = 0.0
    peak_rss: float = 0.0
    settled_rss: float = 0.0
    requests: dict[str, float] = field(default_factory=dict)
    pod_deletes: float = 0.0
    pod_delete_404: float = 0.0
    rss_series: list[tuple[float, float]] = field(default_factory=list)
    created_seconds: float = 0.0
    control_plane_cpu: float = float("nan")
    error: str = ""


class System:
    """How to start one peer on a node of its own, and stop it."""

    name = ""

    def __init__(self, kubeconfig: Path, workdir: Path, args: argparse.Namespace) -> None:
        self.kubeconfig = kubeconfig
        self.workdir = workdir
        self.args = args
        self.process: asyncio.subprocess.Process | None = None
        self.last_argv: list[str] = []

    async def prepare(self, client: KubeClient, node: str) -> None:
        """Anything the system needs on the API server before it starts."""

    def argv(self, node: str) -> list[str]:
        raise NotImplementedError

    def env(self) -> dict[str, str]:
        return dict(os.environ)

    async def start(self, client: KubeClient, node: str) -> None:
        await self.prepare(client, node)
        log = (self.workdir / f"{self.name}-{node}.log").open("wb")
        self.last_argv = self.argv(node)
        self.process = await asyncio.create_subprocess_exec(
            *self.last_argv, stdout=log, stderr=log, env=self.env()
        )

    async def stop(self) -> None:
        if self.process is not None and self.process.returncode is None:
            self.process.terminate()
            try:
                await asyncio.wait_for(self.process.wait(), timeout=30)
            except TimeoutError:
                self.process.kill()
                await self.process.wait()

    def version(self) -> str:
        return ""


class Vkpy(System):
    name = "vkpy"

    def argv(self, node: str) -> list[str]:
        return [
            sys.executable,
            "-m",
            "vkpy",
            f"--kubeconfig={self.kubeconfig}",
            f"--node-name={node}",
            "--provider=sim",
            "--node-ip=127.0.0.1",
            "--listen-address=127.0.0.1",
            f"--port={free_port()}",
            f"--state-dir={self.workdir / node}",
            f"--event-loop={self.args.event_loop}",
            "--log-level=warning",
            *self.args.vkpy_arg,
        ]

    def version(self) -> str:
        out = subprocess.run(
            [sys.executable, "-m", "vkpy", "--version"], capture_output=True, text=True, check=False
        )
        commit = subprocess.run(
            ["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"],
            capture_output=True,
            text=True,
            check=False,
        )
        return f"{out.stdout.strip()} ({commit.stdout.strip()}, {self.args.event_loop} loop)"


class Kwok(System):
    name = "kwok"

    def __init__(self, kubeconfig: Path, workdir: Path, args: argparse.Namespace) -> None:
        super().__init__(kubeconfig, workdir, args)
        self.bin = tool_dir("kwok")
        self.stages = workdir / "kwok-stages.yaml"
        self.stages.write_text(
            subprocess.run(
                [str(self.bin / "kwok-stages")], capture_output=True, text=True, check=True
            ).stdout
        )

    async def prepare(self, client: KubeClient, node: str) -> None:
        """kwok drives Node objects someone else created (as `kwokctl scale node` does)."""
        await client.create("/api/v1/nodes", kwok_node(node))

    def argv(self, node: str) -> list[str]:
        return self.argv_managing(f"--manage-single-node={node}")

    def argv_managing(self, manage: str) -> list[str]:
        """kwok's command line; `manage` is its flag choosing the nodes it drives
        (bench/nodes.py: `--manage-nodes-with-label-selector=...` for a set)."""
        return [
            str(self.bin / "kwok"),
            f"--kubeconfig={self.kubeconfig}",
            f"--config={self.stages}",
            manage,
            "--node-ip=127.0.0.1",
            f"--server-address=127.0.0.1:{free_port()}",
            "--node-lease-duration-seconds=40",
        ]

    def version(self) -> str:
        out = subprocess.run(
            [str(self.bin / "kwok"), "--version"], capture_output=True, text=True, check=False
        )
        return out.stdout.strip() or "kwok v0.8.0"


class VirtualKubelet(System):
    name = "virtual-kubelet"

    def __init__(self, kubeconfig: Path, workdir: Path, args: argparse.Namespace) -> None:
        super().__init__(kubeconfig, workdir, args)
        self.bin = tool_dir("virtual-kubelet")
        pair = self_signed("virtual-kubelet", ["127.0.0.1"])
        self.cert = workdir / "vk.crt"
        self.key = workdir / "vk.key"
        self.cert.write_bytes(pair.cert_pem)
        self.key.write_bytes(pair.key_pem)
        self.config = workdir / "vk-mock.json"

    async def prepare(self, client: KubeClient, node: str) -> None:
        self.config.write_text(json.dumps({node: {"cpu": "1000", "memory": "4Ti", "pods": "5000"}}))

    def env(self) -> dict[str, str]:
        return {
            **os.environ,
            "KUBELET_PORT": str(free_port()),
            "APISERVER_CERT_LOCATION": str(self.cert),
            "APISERVER_KEY_LOCATION": str(self.key),
            "VKUBELET_POD_IP": "127.0.0.1",
        }

    def argv(self, node: str) -> list[str]:
        return [
            str(self.bin / "virtual-kubelet"),
            f"--kubeconfig={self.kubeconfig}",
            "--provider=mock",
            f"--provider-config={self.config}",
            f"--nodename={node}",
            f"--metrics-addr=127.0.0.1:{free_port()}",
            "--enable-node-lease",
        ]

    def version(self) -> str:
        out = subprocess.run(
            [str(self.bin / "virtual-kubelet"), "version"],
            capture_output=True,
            text=True,
            check=False,
        )
        return (out.stdout.strip().splitlines() or ["virtual-kubelet v1.14.1"])[0]


MAKERS: dict[str, Callable[[Path, Path, argparse.Namespace], System]] = {
    "vkpy": Vkpy,
    "kwok": Kwok,
    "virtual-kubelet": VirtualKubelet,
}


async def node_ready(client: KubeClient, node: str) -> bool:
    try:
        obj = await client.get(f"/api/v1/nodes/{node}")
    except ApiError:
        return False
    return any(
        c.get("type") == "Ready" and c.get("status") == "True"
        for c in obj.get("status", {}).get("conditions", [])
    )


class PodWatch:
    """The namespace's pods as the benchmark's one watch sees them (vkpy's own
    list-then-watch loop, which resumes after a dropped or expired watch)."""

    def __init__(self, client: KubeClient, namespace: str) -> None:
        self.running: dict[str, float] = {}
        self.gone: dict[str, float] = {}
        self._watcher = Watcher(
            client, WatchOptions(path=f"/api/v1/namespaces/{namespace}/pods"), self
        )
        self.ready = self._watcher.synced

    async def run(self) -> None:
        await self._watcher.run()

    def replace(self, items: list[dict[str, Any]]) -> None:
        present = {obj.get("metadata", {}).get("name") for obj in items}
        for name in set(self.running) - present:  # deleted while the watch was down
            self.gone.setdefault(name, time.monotonic())
        for obj in items:
            self.apply("ADDED", obj)

    def apply(self, event_type: str, obj: dict[str, Any]) -> None:
        name = obj.get("metadata", {}).get("name")
        if event_type == "DELETED":
            self.gone.setdefault(name, time.monotonic())
        elif obj.get("status", {}).get("phase") == "Running":
            self.running.setdefault(name, time.monotonic())


def control_plane_pids(kubeconfig: Path) -> list[int]:
    """The API server's and etcd's pids, from the state of the dev cluster whose
    folder holds `kubeconfig` (none for another cluster)."""
    try:
        state = DevCluster(kubeconfig.parent).state
    except ClusterError:
        return []
    return [r.pid for r in state.processes if r.name in ("etcd", "kube-apiserver")]


def control_plane_cpu(pids: list[int]) -> float:
    """CPU seconds the API server and etcd have used (NaN without them)."""
    return sum(cpu_seconds(pid) for pid in pids) if pids else float("nan")


async def create_all(
    client: KubeClient, namespace: str, names: list[str], node: str, bound: bool
) -> dict[str, float]:
    created: dict[str, float] = {}
    gate = asyncio.Semaphore(32)

    async def one(name: str) -> None:
        async with gate:
            created[name] = time.monotonic()
            await client.create(f"/api/v1/namespaces/{namespace}/pods", pod(name, node, bound))

    await asyncio.gather(*(one(n) for n in names))
    return created


async def delete_all(client: KubeClient, namespace: str, names: list[str]) -> None:
    gate = asyncio.Semaphore(32)

    async def one(name: str) -> None:
        async with gate:
            try:
                await client.delete(f"/api/v1/namespaces/{namespace}/pods/{name}")
            except ApiError as error:
                if not error.not_found:
                    raise

    await asyncio.gather(*(one(n) for n in names))


async def one_run(
    client: KubeClient, system: System, count: int, round_no: int, args: argparse.Namespace
) -> Run:
    node = f"peer-{system.name[:4]}-{os.getpid()}-{count}-{round_no}"
    namespace = node
    run = Run(system=system.name, pods=count)
    await client.create("/api/v1/namespaces", {"metadata": {"name": namespace}})
    watch = PodWatch(client, namespace)
    watcher = asyncio.create_task(watch.run())
    sampler: asyncio.Task[None] | None = None
    try:
        await system.start(client, node)
        assert system.process is not None
        pid = system.process.pid
        await until(f"{system.name} node Ready", lambda: node_ready(client, node), 120)
        await watch.ready.wait()
        await asyncio.sleep(2)
        t0 = time.monotonic()

        async def sample() -> None:
            while True:
                run.rss_series.append((time.monotonic() - t0, rss_mib(pid)))
                await asyncio.sleep(0.5)

        sampler = asyncio.create_task(sample())
        before = await apiserver_requests_by_code(client)
        cpu0 = cpu_seconds(pid)
        servers = control_plane_pids(system.kubeconfig)
        servers_cpu0 = control_plane_cpu(servers)
        names = [f"b{n:05d}" for n in range(count)]
        started = time.monotonic()
        created = await create_all(client, namespace, names, node, bound=True)
        run.created_seconds = time.monotonic() - started
        limit = args.timeout

        async def all_running(names: list[str] = names) -> bool:
            return all(n in watch.running for n in names)

        try:
            await until("all Running", all_running, limit)
        except TimeoutError:
            run.error = (
                f"{sum(n in watch.running for n in names)}/{count} Running after {limit:.0f} s"
            )
        run.running = sum(n in watch.running for n in names)
        run.bound_seconds = max(watch.running.values(), default=started) - started
        run.latencies = sorted(watch.running[n] - created[n] for n in names if n in watch.running)
        await asyncio.sleep(3)
        run.settled_rss = rss_mib(pid)
        deleting = time.monotonic()
        await delete_all(client, namespace, names)

        async def all_gone(names: list[str] = names) -> bool:
            return all(n in watch.gone for n in names)

        try:
            await until("all gone", all_gone, limit)
            run.delete_seconds = max(watch.gone[n] for n in names) - deleting
        except TimeoutError:
            run.error += f"; {sum(n in watch.gone for n in names)}/{count} deleted"
            run.delete_seconds = float("nan")
        await asyncio.sleep(3)  # trailing writes (Events) that belong to these pods
        after = await apiserver_requests_by_code(client)
        run.cpu_seconds = cpu_seconds(pid) - cpu0
        run.control_plane_cpu = control_plane_cpu(servers) - servers_cpu0
        delta = after - before
        own: Counter[str] = Counter({"POST": count, "DELETE": count, "LIST": 0})
        by_verb: Counter[str] = Counter()
        pod_deletes: Counter[str] = Counter()
        for (verb, resource, sub, code), n in delta.items():
            if resource:
                by_verb[verb] += n
            if (verb, resource, sub) == ("DELETE", "pods", ""):
                pod_deletes[code] += n
        run.requests = {v: max(0, by_verb[v] - own[v]) / count for v in VERBS}
        run.pod_deletes = max(0, sum(pod_deletes.values()) - count) / count
        run.pod_delete_404 = pod_deletes["404"] / count
        if not args.no_scheduled and not run.error:
            snames = [f"s{n:05d}" for n in range(count)]
            sstart = time.monotonic()
            screated = await create_all(client, namespace, snames, node, bound=False)

            async def all_scheduled(names: list[str] = snames) -> bool:
                return all(n in watch.running for n in names)

            try:
                await until("scheduled pods Running", all_scheduled, limit)
                run.scheduled_seconds = max(watch.running[n] for n in snames) - sstart
                run.scheduled_latencies = sorted(watch.running[n] - screated[n] for n in snames)
            except TimeoutError:
                run.error = "scheduled pods not all Running"
            await delete_all(client, namespace, snames)

            async def scheduled_gone(names: list[str] = snames) -> bool:
                return all(n in watch.gone for n in names)

            with contextlib.suppress(TimeoutError):
                await until("scheduled pods gone", scheduled_gone, limit)
        run.peak_rss = peak_rss_mib(pid)
    finally:
        if sampler is not None:
            sampler.cancel()
        watcher.cancel()
        await system.stop()
        for path in (
            f"/api/v1/namespaces/{namespace}",
            f"/api/v1/nodes/{node}",
            f"/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases/{node}",
        ):
            with contextlib.suppress(ApiError):
                await client.request("DELETE", path, query={"gracePeriodSeconds": 0})
    return run


def pct(values: list[float], q: int) -> float:
    if len(values) < 2:
        return values[0] if values else float("nan")
    return statistics.quantiles(values, n=100)[q - 1]


def summary(runs: list[Run]) -> dict[str, float]:
    """Medians over rounds of one system's figures."""

    def med(f: Callable[[Run], float]) -> float:
        values = [f(r) for r in runs if r.running]
        return statistics.median(values) if values else float("nan")

    out = {
        "pods/s to Running": med(lambda r: r.running / r.bound_seconds if r.bound_seconds else 0),
        "creates taken by the API server /s": med(lambda r: r.pods / r.created_seconds),
        "last Running after the last create ms": med(
            lambda r: (r.bound_seconds - r.created_seconds) * 1000
        ),
        "p50 create→Running ms": med(lambda r: pct(r.latencies, 50) * 1000),
        "p90 create→Running ms": med(lambda r: pct(r.latencies, 90) * 1000),
        "p99 create→Running ms": med(lambda r: pct(r.latencies, 99) * 1000),
        "delete all s": med(lambda r: r.delete_seconds),
        "scheduled pods/s": med(
            lambda r: r.pods / r.scheduled_seconds if r.scheduled_seconds else float("nan")
        ),
        "scheduled p99 ms": med(
            lambda r: (
                pct(r.scheduled_latencies, 99) * 1000 if r.scheduled_latencies else float("nan")
            )
        ),
        "CPU ms per pod": med(lambda r: r.cpu_seconds * 1000 / r.pods),
        "API server and etcd CPU ms per pod": med(lambda r: r.control_plane_cpu * 1000 / r.pods),
        "peak RSS MiB": med(lambda r: r.peak_rss),
        "settled RSS MiB": med(lambda r: r.settled_rss),
        "pod DELETEs per pod": med(lambda r: r.pod_deletes),
        "pod DELETEs answered 404 per pod": med(lambda r: r.pod_delete_404),
    }
    for verb in VERBS:
        out[f"API {verb} per pod"] = med(lambda r, v=verb: r.requests.get(v, 0.0))
    out["API writes per pod"] = med(
        lambda r: sum(r.requests.get(v, 0.0) for v in ("POST", "PUT", "PATCH", "DELETE"))
    )
    return out


def fmt(value: float) -> str:
    if value != value:  # NaN
        return "—"
    return f"{value:.3g}" if abs(value) < 100 else f"{value:.0f}"


def table(results: dict[str, dict[str, float]], order: list[str]) -> str:
    measures = list(next(iter(results.values())).keys())
    head = (
        "| measure | "
        + " | ".join(order)
        + " | "
        + " | ".join(f"{s} / kwok" for s in order if s != "kwok")
    )
    lines = [head + " |", "|---" * (1 + len(order) + len(order) - 1) + "|"]
    for m in measures:
        kwok = results.get("kwok", {}).get(m, float("nan"))
        cells = [fmt(results[s][m]) for s in order]
        ratios = [
            fmt(results[s][m] / kwok) if kwok and kwok == kwok else "—"
            for s in order
            if s != "kwok"
        ]
        lines.append(f"| {m} | " + " | ".join(cells + ratios) + " |")
    return "\n".join(lines)


def report(
    results: dict[str, dict[str, float]],
    runs: list[Run],
    versions: dict[str, str],
    args: argparse.Namespace,
    loads: list[str],
) -> str:
    order = [s for s in SYSTEMS if s in results]
    errors = [
        f"- round {i // len(order) + 1}, {r.system}: {r.error}"
        for i, r in enumerate(runs)
        if r.error
    ]
    return (
        f"### Peers side by side ({datetime.now(UTC):%Y-%m-%d %H:%M} UTC, {platform.machine()}, "
        f"{os.cpu_count()} cores, Python {platform.python_version()})\n\n"
        f"`python bench/peers.py --pods {args.pods} --rounds {args.rounds}`: {args.pods} pods "
        f"bound to one node, then deleted, then {args.pods} placed by the scheduler; "
        f"{args.rounds} rounds, systems interleaved, medians. Load average at each round's "
        f"start: {', '.join(loads)}. Versions: "
        + "; ".join(f"{k}: {v}" for k, v in versions.items())
        + ". API requests per pod: the API server's counters over the bound and delete "
        "steps (every client's, less the benchmark's own creates and deletes).\n\n"
        + table(results, order)
        + "\n"
        + ("\nIncomplete runs:\n" + "\n".join(errors) + "\n" if errors else "")
    )


@dataclass
class Measured:
    """One peers run: medians per system, every round's runs, versions, load per round."""

    results: dict[str, dict[str, float]]
    runs: list[Run]
    versions: dict[str, str]
    loads: list[str]


async def measure(args: argparse.Namespace, kubeconfig: Path, workdir: Path) -> Measured:
    """Every round of every system in `args.systems`, interleaved, and their medians."""
    client = await KubeClient.connect(ClientOptions(kubeconfig=str(kubeconfig)))
    systems = {name: MAKERS[name](kubeconfig, workdir, args) for name in args.systems}
    versions = {name: s.version() for name, s in systems.items()}
    runs: list[Run] = []
    loads: list[str] = []
    try:
        for round_no in range(args.rounds):
            order = list(args.systems)
            shift = round_no % len(order)
            order = order[shift:] + order[:shift]
            loads.append(f"{os.getloadavg()[0]:.1f}")
            for name in order:
                count = args.pods if name != "virtual-kubelet" else args.vk_pods or args.pods
                print(f"round {round_no + 1}: {name} with {count} pods", file=sys.stderr)
                run = await one_run(client, systems[name], count, round_no, args)
                print(
                    f"  {run.running} Running, {run.error or 'ok'}; "
                    f"{run.running / run.bound_seconds if run.bound_seconds else 0:.1f} pods/s, "
                    f"CPU {run.cpu_seconds * 1000 / count:.2f} ms per pod, "
                    f"load {os.getloadavg()[0]:.1f}",
                    file=sys.stderr,
                )
                runs.append(run)
    finally:
        await client.close()
    results = {
        name: summary([r for r in runs if r.system == name])
        for name in args.systems
        if any(r.system == name for r in runs)
    }
    return Measured(results, runs, versions, loads)


async def bench(args: argparse.Namespace, kubeconfig: Path, workdir: Path) -> str:
    measured = await measure(args, kubeconfig, workdir)
    results, runs = measured.results, measured.runs
    if args.plots:
        last = {r.system: r for r in runs}
        latencies = {s: [x * 1000 for x in r.latencies] for s, r in last.items()}
        write(
            args.plots,
            "peers-latency-cdf",
            cdf_series(latencies),
            "create→Running (ms)",
            "share of pods Running",
        )
        write(
            args.plots,
            "peers-rss",
            {s: r.rss_series for s, r in last.items()},
            "seconds",
            "RSS (MiB)",
        )
    return report(results, runs, measured.versions, args, measured.loads)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pods", type=int, default=300)
    parser.add_argument("--vk-pods", type=int, default=0, help="fewer pods for virtual-kubelet")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--systems", nargs="+", default=list(SYSTEMS), choices=SYSTEMS)
    parser.add_argument("--timeout", type=float, default=300, help="per step (s)")
    parser.add_argument("--no-scheduled", action="store_true", help="skip the scheduler step")
    parser.add_argument("--event-loop", default="asyncio", choices=["asyncio", "uvloop"])
    parser.add_argument("--vkpy-arg", action="append", default=[], help="extra vkpy flag")
    parser.add_argument("--kubeconfig", type=Path, help="existing cluster (default: start one)")
    parser.add_argument(
        "--plots", "--svg", type=Path, help="write the plots (SVG and PNG) into this folder"
    )
    published.add_options(parser)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="vkpy-peers-") as tmp:
        workdir = Path(tmp)
        with given_or_started(args.kubeconfig, workdir) as access:
            text = asyncio.run(bench(args, access.kubeconfig, workdir))
    print(text)
    published.append(text, args)
    return 0


if __name__ == "__main__":
    sys.exit(main())
