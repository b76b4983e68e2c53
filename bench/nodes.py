"""Many nodes from one process: what N sim nodes cost (issue 17).

Starts `python -m vkpy --nodes N --provider sim`, waits until all N nodes are Ready,
optionally binds P pods to each, then watches a steady window and reports: time to
all Ready (counted from before the first Node object exists: vkpy creates its own, and
kwok's are created by the bench, as `kwokctl scale node` does, a time also shown
apart), the agent's CPU (share of one core) and RSS (settled and peak), per node,
the API requests per second the agent's nodes cost the API server by verb and
resource (from the API server's own counters, so a shared cluster adds its noise),
and how late the Leases were, as a watch sees their renewals arrive (the kubelet's
renew interval is 10 s: a renewal seen more than 11 s after the one before is late;
see `Looks`).

With `--systems vkpy kwok` (the default) kwok drives the same number of nodes with the
same pods per node on the same control plane, one system after the other, and the
figures are set side by side with vkpy / kwok ratios for CPU and RSS per node. vkpy's
nodes serve a certificate from the cluster's kubelet signing CA, as a kubelet's
would: with a self-signed one, metrics-server's scrapes (every node every 10 s)
fail verification and never keep a connection, so 1000 nodes cost the agent 100 TLS
handshakes a second (a third of its time in the first profile) that no real node pays.

    python bench/nodes.py --nodes 1000 --pods-per-node 10 --window 60
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import platform
import re
import signal
import sys
import tempfile
import time
import tracemalloc
import urllib.request
from collections import Counter
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, TypeVar

import published
from peers import Kwok, kwok_node, rss_mib
from pods import (
    apiserver_requests_by_code,
    cpu_seconds,
    create_bound_pods,
    free_port,
    node_is_ready,
    parse_time,
    peak_rss_mib,
    without_codes,
)

from vkpy.devcluster import given_or_started
from vkpy.devcluster.cluster import DevCluster
from vkpy.devcluster.nodes import issue_serving_cert
from vkpy.devcluster.state import free_port_range
from vkpy.kube.client import ApiError, ClientOptions, KubeClient
from vkpy.kube.watch import Watcher, WatchOptions

ROOT = Path(__file__).resolve().parents[1]
T = TypeVar("T")


async def running_count(client: KubeClient, namespace: str) -> int:
    """How many pods in `namespace` are Running."""
    pods = await client.get(
        f"/api/v1/namespaces/{namespace}/pods", {"fieldSelector": "status.phase=Running"}
    )
    return len(pods.get("items", []))


class Looks:
    """The run's Nodes and Leases as two watches see them, stamped with the bench's clock
    when each change arrives. The node lifecycle controller judges a Lease the same way:
    it notes its own time when it sees a renewTime change, so a renewal is late when the
    API server shows it late, whatever renewTime it carries. A LIST of 5,000 Leases and
    5,000 Nodes every 5 s, as the bench did before, cost the API server more than
    anything but the renewals, and a Lease's age read after such a LIST came back
    included the LIST's own time (up to seconds under load, against 1 s of slack)."""

    def __init__(self, client: KubeClient, prefix: str, selector: str) -> None:
        self._prefix = prefix + "-"
        self.ready: set[str] = set()
        self.renewed: dict[str, tuple[str, float]] = {}
        """Lease name: (renewTime, when the bench saw it)."""
        self.counting = False
        self.late_renewals = 0
        """Renewals seen more than `LATE` s after the one before, while counting."""
        self.late_nodes: set[str] = set()
        self.longest_gap = 0.0
        self.stamped_late = 0
        """Renewals whose renewTime is more than `LATE` s after the one before: the
        agent's own schedule late (the rest of a late renewal's time is the way to the
        watch: the agent's wait to send, the API server, the watch, this process)."""
        self.on_the_way: list[float] = []
        """Per renewal seen while counting: s from its renewTime to its arrival here."""
        self._watchers = [
            Watcher(
                client,
                WatchOptions(
                    path="/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases",
                    resource="leases",
                ),
                _Handler(self._lease),
            ),
            Watcher(
                client,
                WatchOptions(path="/api/v1/nodes", label_selector=selector, resource="nodes"),
                _Handler(self._node),
            ),
        ]

    async def run(self) -> None:
        await asyncio.gather(*(w.run() for w in self._watchers))

    def late_now(self) -> tuple[int, float]:
        """(Leases whose last renewal was seen more than `LATE` s ago, the oldest age)."""
        now = time.monotonic()
        ages = [now - seen for _, seen in self.renewed.values()]
        return sum(1 for a in ages if a > LATE), max(ages, default=0.0)

    def _lease(self, event_type: str, obj: dict[str, Any]) -> None:
        name = obj.get("metadata", {}).get("name", "")
        if not name.startswith(self._prefix):
            return
        if event_type == "DELETED":
            self.renewed.pop(name, None)
            return
        renew = obj.get("spec", {}).get("renewTime", "")
        now = time.monotonic()
        before = self.renewed.get(name)
        if before is not None and before[0] == renew:
            return
        if before is not None and self.counting:
            gap = now - before[1]
            self.longest_gap = max(self.longest_gap, gap)
            if gap > LATE:
                self.late_renewals += 1
                self.late_nodes.add(name)
            stamped = parse_time(renew)
            if (stamped - parse_time(before[0])).total_seconds() > LATE:
                self.stamped_late += 1
            self.on_the_way.append(time.time() - stamped.timestamp())
        self.renewed[name] = (renew, now)

    def way_percentiles(self) -> str:
        """p50 / p99 / max of `on_the_way`, in s."""
        ways = sorted(self.on_the_way)
        if not ways:
            return "—"
        pick = [ways[len(ways) // 2], ways[min(len(ways) - 1, len(ways) * 99 // 100)], ways[-1]]
        return " / ".join(f"{w:.2f}" for w in pick)

    def _node(self, event_type: str, obj: dict[str, Any]) -> None:
        name = obj.get("metadata", {}).get("name", "")
        if event_type != "DELETED" and node_is_ready(obj):
            self.ready.add(name)
        else:
            self.ready.discard(name)


LATE = 11.0
"""The kubelet renews its Lease every 10 s: later than that by a tenth is late."""


class _Handler:
    """A Watcher's handler that passes each object to one function."""

    def __init__(self, apply: Callable[[str, dict[str, Any]], None]) -> None:
        self.apply = apply

    def replace(self, items: list[dict[str, Any]]) -> None:
        for obj in items:
            self.apply("ADDED", obj)


def agent_requests(port: int) -> Counter[str]:
    """The agent's own count of API requests by method and answer (vkpy_api_requests_total);
    empty when the agent does not answer in time (then the row shows nothing)."""
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as got:
            text = got.read().decode()
    except OSError:
        return Counter()
    counts: Counter[str] = Counter()
    for labels, value in re.findall(r"^vkpy_api_requests_total\{(.*)\} (\S+)$", text, re.M):
        fields = dict(re.findall(r'(\w+)="([^"]*)"', labels))
        counts[f"{fields.get('method')} {fields.get('code')}"] += int(float(value))
    return counts


async def start_vkpy(
    args: argparse.Namespace, kubeconfig: Path, workdir: Path, prefix: str, metrics_port: int
) -> asyncio.subprocess.Process:
    """`python -m vkpy --nodes N` with a serving certificate from the cluster's kubelet
    CA when the cluster's PKI is at hand (a dev cluster's kubeconfig sits in its dir)."""
    tls: list[str] = []
    cluster = DevCluster(kubeconfig.parent)
    if cluster.pki.kubelet_ca.key.exists():
        cert = issue_serving_cert(prefix, workdir / "serving", cluster.pki)
        tls = [f"--tls-cert-file={cert.cert}", f"--tls-private-key-file={cert.key}"]
    log = (workdir / f"vkpy-{prefix}.log").open("wb")
    env = dict(os.environ)
    launch = ["-m", "vkpy"]
    if args.tracemalloc:
        launch = [str(ROOT / "bench" / "traced.py")]
        env["VKPY_TRACEMALLOC_OUT"] = str(workdir / "tracemalloc.snapshot")
    return await asyncio.create_subprocess_exec(
        sys.executable,
        *launch,
        f"--kubeconfig={kubeconfig}",
        f"--node-name={prefix}",
        f"--nodes={args.nodes}",
        f"--label=vkpy.io/bench={prefix}",
        "--provider=sim",
        "--node-ip=127.0.0.1",
        "--listen-address=127.0.0.1",
        f"--port={free_port_range(args.nodes)}",
        f"--state-dir={workdir / 'state'}",
        f"--event-loop={args.event_loop}",
        "--log-level=warning",
        f"--metrics-port={metrics_port}",
        *tls,
        stdout=log,
        stderr=log,
        env=env,
    )


async def start_kwok(
    args: argparse.Namespace, client: KubeClient, kubeconfig: Path, workdir: Path, prefix: str
) -> asyncio.subprocess.Process:
    """kwok driving N Node objects the bench makes (as `kwokctl scale node` does),
    picked by the bench's label, with bench/peers.py's stages and settings."""
    kwok = Kwok(kubeconfig, workdir, args)
    gate = asyncio.Semaphore(32)

    async def one(n: int) -> None:
        async with gate:
            await client.create(
                "/api/v1/nodes", kwok_node(f"{prefix}-{n}", {"vkpy.io/bench": prefix})
            )

    await asyncio.gather(*(one(n) for n in range(args.nodes)))
    log = (workdir / f"kwok-{prefix}.log").open("wb")
    argv = kwok.argv_managing(f"--manage-nodes-with-label-selector=vkpy.io/bench={prefix}")
    return await asyncio.create_subprocess_exec(*argv, stdout=log, stderr=log)


async def settled(call: Callable[[], Awaitable[T]], tries: int = 5) -> T:
    """`call()`, again after a pause when the API server does not answer in time (the
    bench's own reads must not end a run on a loaded machine)."""
    for attempt in range(tries):
        try:
            return await call()
        except ApiError as error:
            if not error.retryable or attempt == tries - 1:
                raise
            await asyncio.sleep(5)
    raise AssertionError("unreachable")


async def bench(
    args: argparse.Namespace, kubeconfig: Path, workdir: Path, system: str
) -> dict[str, object]:
    client = await KubeClient.connect(ClientOptions(kubeconfig=str(kubeconfig)))
    prefix = f"bn{os.getpid()}{system[0]}"
    selector = f"vkpy.io/bench={prefix}"
    metrics_port = free_port()
    looks = Looks(client, prefix, selector)
    watching = asyncio.create_task(looks.run())
    # Both clocks start before the first Node object exists: vkpy creates its nodes,
    # kwok's are created here (as `kwokctl scale node` does) before kwok starts.
    started = time.monotonic()
    created = float("nan")
    if system == "kwok":
        agent = await start_kwok(args, client, kubeconfig, workdir, prefix)
        created = time.monotonic() - started
    else:
        agent = await start_vkpy(args, kubeconfig, workdir, prefix, metrics_port)
    namespace = f"{prefix}-pods"
    try:
        cpu0 = cpu_seconds(agent.pid)
        while (ready := len(looks.ready)) < args.nodes:
            if agent.returncode is not None:
                raise RuntimeError(f"{system} exited; see its log")
            if time.monotonic() - started > args.timeout:
                break  # reported: how many were Ready, and how many during the window
            await asyncio.sleep(0.5)
        all_ready = time.monotonic() - started
        register_cpu = cpu_seconds(agent.pid) - cpu0
        running = 0
        pods_running_seconds = float("nan")
        if args.pods_per_node:
            count = args.nodes * args.pods_per_node
            bindings = [(f"p{n:06d}", f"{prefix}-{n % args.nodes}") for n in range(count)]
            pods_started = time.monotonic()
            await create_bound_pods(client, namespace, bindings, 32)
            while time.monotonic() - pods_started < args.timeout:
                if await settled(lambda: running_count(client, namespace)) >= count:
                    pods_running_seconds = time.monotonic() - pods_started
                    break
                await asyncio.sleep(2)
        await asyncio.sleep(args.settle)
        before = await settled(lambda: apiserver_requests_by_code(client))
        agent_before = agent_requests(metrics_port) if system == "vkpy" else Counter[str]()
        cpu_before = cpu_seconds(agent.pid)
        window_start = time.monotonic()
        looks.counting = True
        late, oldest = 0, 0.0
        fewest_ready = args.nodes
        while time.monotonic() - window_start < args.window:
            await asyncio.sleep(min(1.0, args.window))
            count, age = looks.late_now()
            late, oldest = max(late, count), max(oldest, age)
            fewest_ready = min(fewest_ready, len(looks.ready))
        looks.counting = False
        elapsed = time.monotonic() - window_start
        after = await settled(lambda: apiserver_requests_by_code(client))
        agent_after = agent_requests(metrics_port) if system == "vkpy" else Counter[str]()
        cpu = cpu_seconds(agent.pid) - cpu_before
        rss = rss_mib(agent.pid)
        peak = peak_rss_mib(agent.pid)
        if args.pods_per_node:
            running = await settled(lambda: running_count(client, namespace))
        memory = await traced_memory(agent, workdir, args) if system == "vkpy" else ""
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            log = workdir / f"{system}-{prefix}.log"
            print(log.read_text(errors="replace")[-5000:], file=sys.stderr)
        raise
    finally:
        if agent.returncode is None:
            agent.terminate()
            try:
                await asyncio.wait_for(agent.wait(), timeout=60)
            except TimeoutError:
                agent.kill()
                await agent.wait()
        if args.pods_per_node:
            with contextlib.suppress(ApiError):
                await client.request(
                    "DELETE", f"/api/v1/namespaces/{namespace}", query={"gracePeriodSeconds": 0}
                )
        with contextlib.suppress(ApiError):
            await client.request("DELETE", "/api/v1/nodes", query={"labelSelector": selector})
        watching.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await watching
        await client.close()
    by_code = after - before
    delta = without_codes(by_code)
    # Lease PUTs by answer code: 409s show renewals that conflicted.
    lease_puts: Counter[str] = Counter()
    for (verb, resource, _sub, code), n in by_code.items():
        if (verb, resource) == ("PUT", "leases"):
            lease_puts[code] += n
    rates = {
        f"{verb} {resource}{'/' + sub if sub else ''}": round(n / elapsed, 2)
        for (verb, resource, sub), n in delta.most_common()
        if n / elapsed >= 0.05
    }
    return {
        "system": system,
        "nodes": args.nodes,
        "pods": args.nodes * args.pods_per_node,
        "pods_running_at_end": running,
        "seconds_from_first_create_to_all_running": round(pods_running_seconds, 1),
        "event_loop": args.event_loop,
        "ready_at_start": ready,
        "seconds_to_that": round(all_ready, 1),
        "of_which_the_bench_creating_node_objects": round(created, 1),
        "fewest_ready_in_window": fewest_ready,
        "registration_cpu_seconds": round(register_cpu, 1),
        "window_seconds": round(elapsed),
        "agent_cpu_share_of_one_core": round(cpu / elapsed, 3),
        "agent_cpu_ms_per_node_per_minute": round(cpu * 1000 / args.nodes / elapsed * 60, 2),
        "registration_cpu_ms_per_node": round(register_cpu * 1000 / args.nodes, 2),
        "agent_rss_mib": round(rss, 1),
        "agent_peak_rss_mib": round(peak, 1),
        "rss_kib_per_node": round(rss * 1024 / args.nodes, 1),
        "late_leases_at_worst": late,
        "oldest_lease_age_seconds": round(oldest, 1),
        "renewals_seen_late": looks.late_renewals,
        "nodes_with_a_late_renewal": len(looks.late_nodes),
        "longest_gap_between_renewals_seconds": round(looks.longest_gap, 1),
        "renewals_stamped_late_by_the_agent": looks.stamped_late,
        "seconds_from_renew_time_to_seen_p50_p99_max": looks.way_percentiles(),
        "api_requests_per_second": round(sum(delta.values()) / elapsed, 1),
        "by_verb_and_resource_per_second": rates,
        "lease_puts_per_second_by_code": {
            code: round(n / elapsed, 2) for code, n in lease_puts.most_common()
        },
        "agent_requests_per_second_by_method_and_code": {
            key: round(n / elapsed, 2) for key, n in (agent_after - agent_before).most_common()
        },
        "tracemalloc": memory,
    }


async def traced_memory(
    agent: asyncio.subprocess.Process, workdir: Path, args: argparse.Namespace
) -> str:
    """With `--tracemalloc`: the agent's traced memory after the window, per node, by
    the vkpy line that allocated it (the innermost frame in vkpy) and by file (the
    innermost frame), as markdown tables; "" without."""
    if not args.tracemalloc:
        return ""
    out = workdir / "tracemalloc.snapshot"
    done = out.with_name(out.name + ".done")
    agent.send_signal(signal.SIGUSR2)
    for _ in range(600):
        if done.exists():
            break
        await asyncio.sleep(1)
    snapshot = tracemalloc.Snapshot.load(str(out))
    return memory_tables(snapshot, args.nodes, args.top)


CODECS = ("/core/jsoncodec.py", "/core/packed_json.py")
"""Passed over when naming the allocating line: what a decoded or packed object costs
is its caller's to explain."""


def memory_tables(snapshot: tracemalloc.Snapshot, nodes: int, top: int) -> str:
    """Traced KiB per node by the allocating vkpy line and by innermost file."""
    total = sum(s.size for s in snapshot.statistics("filename"))
    by_line: Counter[str] = Counter()
    counts: Counter[str] = Counter()
    for trace in snapshot.traces:
        where = next(
            (
                f"{_short(f.filename)}:{f.lineno}"
                for f in reversed(trace.traceback)
                if "/vkpy/" in f.filename and not f.filename.endswith(CODECS)
            ),
            "(no vkpy frame: imports, the loop, libraries)",
        )
        by_line[where] += trace.size
        counts[where] += 1
    by_file = Counter(
        {_short(s.traceback[0].filename): s.size for s in snapshot.statistics("filename")}
    )
    lines = [
        f"traced {total / 2**20:.1f} MiB, {total / 1024 / nodes:.1f} KiB per node",
        "",
        "| innermost vkpy line | KiB per node | blocks per node |",
        "|---|---|---|",
    ]
    for where, size in by_line.most_common(top):
        lines.append(f"| `{where}` | {size / 1024 / nodes:.2f} | {counts[where] / nodes:.1f} |")
    lines += ["", "| innermost file | KiB per node |", "|---|---|"]
    for where, size in by_file.most_common(top):
        lines.append(f"| `{where}` | {size / 1024 / nodes:.2f} |")
    return "\n".join(lines)


def _short(filename: str) -> str:
    for marker in ("/vkpy/", "/site-packages/", "/lib/python3"):
        if marker in filename:
            return filename[filename.index(marker) + 1 :]
    return filename


RATIOS = (
    "agent_cpu_ms_per_node_per_minute",
    "registration_cpu_ms_per_node",
    "agent_rss_mib",
    "agent_peak_rss_mib",
    "rss_kib_per_node",
)
"""The measures also given as vkpy / kwok."""


def report(
    results: dict[str, dict[str, object]], loads: dict[str, str], args: argparse.Namespace
) -> str:
    systems = list(results)
    keys = list(dict.fromkeys(k for r in results.values() for k in r))
    both = "vkpy" in results and "kwok" in results
    head = "| measure | " + " | ".join(systems) + (" | vkpy / kwok |" if both else " |")
    rows = [head, "|---" * (len(systems) + 1 + both) + "|"]
    for key in keys:
        if key == "tracemalloc":
            continue
        cells = [str(results[s].get(key, "—")) for s in systems]
        if both:
            vkpy, kwok = results["vkpy"].get(key), results["kwok"].get(key)
            numbers = isinstance(vkpy, float | int) and isinstance(kwok, float | int)
            if key in RATIOS and numbers and kwok:
                cells.append(f"{float(str(vkpy)) / float(str(kwok)):.2f}")
            else:
                cells.append("")
        rows.append(f"| {key} | " + " | ".join(cells) + " |")
    command = (
        f"python bench/nodes.py --nodes {args.nodes} --pods-per-node {args.pods_per_node} "
        f"--window {args.window:g} --systems {' '.join(systems)}"
    )
    load = "; ".join(f"{s} {loads[s]}" for s in systems)
    return (
        f"### Many nodes in one process ({datetime.now(UTC):%Y-%m-%d %H:%M} UTC, "
        f"{platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}, "
        f"load average at each system's start: {load})\n\n"
        f"`{command}` (sim backend for vkpy; kwok with bench/peers.py's stages; one system "
        "after the other on one control plane; API requests from the API server's counters "
        "over the window: the whole cluster's)\n\n"
        + "\n".join(rows)
        + "\n"
        + "".join(
            f"\n{system}'s memory (tracemalloc, after the window):\n\n{r['tracemalloc']}\n"
            for system, r in results.items()
            if r.get("tracemalloc")
        )
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=1000)
    parser.add_argument("--pods-per-node", type=int, default=0)
    parser.add_argument("--window", type=float, default=60, help="steady window (s)")
    parser.add_argument("--settle", type=float, default=15, help="wait before the window (s)")
    parser.add_argument("--timeout", type=float, default=600)
    parser.add_argument("--event-loop", default="asyncio", choices=["asyncio", "uvloop"])
    parser.add_argument("--systems", nargs="+", default=["vkpy", "kwok"], choices=["vkpy", "kwok"])
    parser.add_argument("--kubeconfig", type=Path, help="existing cluster (default: start one)")
    parser.add_argument(
        "--tracemalloc",
        action="store_true",
        help="run vkpy under bench/traced.py and report its memory by line (slows it)",
    )
    parser.add_argument("--top", type=int, default=25, help="rows of the memory tables")
    published.add_options(parser)
    args = parser.parse_args()
    results: dict[str, dict[str, object]] = {}
    loads: dict[str, str] = {}
    with tempfile.TemporaryDirectory(prefix="vkpy-bench-") as tmp:
        workdir = Path(tmp)
        with given_or_started(args.kubeconfig, workdir) as access:
            for system in args.systems:
                loads[system] = " ".join(f"{x:.1f}" for x in os.getloadavg())
                results[system] = asyncio.run(bench(args, access.kubeconfig, workdir, system))
                print(results[system], flush=True)
    text = report(results, loads, args)
    print(text)
    published.append(text, args)
    return 0


if __name__ == "__main__":
    sys.exit(main())
