"""vkpy and kwok as a user would compare them: a fresh cluster per run, defaults, 32 clients.

bench/peers.py runs every system on one long-lived control plane, with its own tuned
flags and one client. A user comparing two agents does it differently, and saw
different figures (issue 30); this is that workload, kept as a benchmark:

- each run starts a **fresh** local control plane (`DevCluster.up`), then the agent
  with its **default flags** (only what a loopback-only cluster needs: node address,
  listen address and port; vkpy's sim backend with `start_seconds: 0`; kwok with the
  Stages its module ships, as kwokctl installs them), and waits for its node Ready;
- N pods with `spec.nodeName` set are created by **32 concurrent clients** (each its
  own API connection), each pod timed from its POST to the first watch event that
  shows it Running;
- `kubectl delete pods -l ... --wait=false`, then until every DELETED event;
- runs are interleaved (vkpy, kwok, vkpy, kwok, ...) and each figure is the median of
  a system's runs.

Reported per system and as ratios to kwok: pods/s, latency percentiles, the creating
clients' own POST phase (how long the API server took to take the creates while the
agent worked: what the agent costs the API server), the agent's CPU and peak RSS,
and the API requests per pod by verb and resource during creation and deletion
(Events counted apart), from the API server's own counters; the agent's log lines per
pod at its default level, and its TCP connections to the API server after the burst
(each one a TLS handshake the API server did); the API server's own CPU seconds and
its mean time per request by verb and resource while the clients create (its
`process_cpu_seconds_total` and `apiserver_request_duration_seconds`). `--profile DIR`
runs vkpy under cProfile (one file per run; its call counts, not its timings, on a
shared machine); `--apiserver-pprof DIR` takes a CPU profile of the API server over
each burst (`go tool pprof -top DIR/<run>.pprof`), to see what an agent costs it.

    python bench/fresh.py --pods 1000 --rounds 3
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import platform
import statistics
import sys
import tempfile
import time
from collections import Counter
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import published
from peers import Kwok, PodWatch, System, Vkpy, fmt, node_ready, pct
from pods import apiserver_requests_by_code, cpu_seconds, free_port, peak_rss_mib, until

from vkpy.devcluster import DevCluster
from vkpy.kube.client import ApiError, ClientOptions, KubeClient

SYSTEMS = ("vkpy", "kwok")
CLIENTS = 32
LABEL = "bench=fresh"


class DefaultVkpy(Vkpy):
    """vkpy as `python -m vkpy` starts with its defaults, on the sim backend."""

    def argv(self, node: str) -> list[str]:
        config = self.workdir / "sim.yaml"
        platform = self.args.sim_platform_dir
        config.write_text(
            "start_seconds: 0\n" + (f"platform_dir: {platform / node}\n" if platform else "")
        )
        profile: list[str] = []
        if self.args.profile:  # cProfile writes when vkpy ends (SIGTERM: a clean exit)
            self.args.profile.mkdir(parents=True, exist_ok=True)
            out = self.args.profile / f"{self.workdir.name}.prof"
            profile = ["-m", "cProfile", "-o", str(out)]
        return [
            sys.executable,
            *profile,
            "-m",
            "vkpy",
            f"--kubeconfig={self.kubeconfig}",
            f"--node-name={node}",
            "--provider=sim",
            f"--provider-config={config}",
            "--node-ip=127.0.0.1",
            "--listen-address=127.0.0.1",
            f"--port={free_port()}",
            f"--state-dir={self.workdir / node}",
            *self.args.vkpy_arg,
        ]


@dataclass
class Run:
    """One system's figures in one run on its own fresh cluster."""

    system: str
    pods: int
    running: int = 0
    seconds: float = 0.0
    latencies: list[float] = field(default_factory=list)
    post_phase: float = 0.0
    delete_seconds: float = float("nan")
    cpu_seconds: float = 0.0
    peak_rss: float = 0.0
    connections: int = 0
    log_lines: int = 0
    apiserver_cpu: float = 0.0
    server_ms: dict[str, float] = field(default_factory=dict)
    create_requests: Counter[str] = field(default_factory=Counter)
    delete_requests: Counter[str] = field(default_factory=Counter)
    error: str = ""


def pod(name: str, node: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "labels": {"bench": "fresh"}},
        "spec": {
            "nodeName": node,
            "containers": [{"name": "c", "image": "registry.k8s.io/pause:3.10"}],
            "tolerations": [{"operator": "Exists"}],
        },
    }


def by_resource(delta: Counter[tuple[str, str, str, str]]) -> Counter[str]:
    """`VERB resource[/sub]` counts, every client's."""
    out: Counter[str] = Counter()
    for (verb, resource, sub, _code), n in delta.items():
        if resource:
            out[f"{verb} {resource}{'/' + sub if sub else ''}"] += n
    return out


async def create_with_clients(
    kubeconfig: Path, namespace: str, names: list[str], node: str
) -> tuple[dict[str, float], float]:
    """Each name POSTed by one of CLIENTS clients (connections of their own), all at
    once; the POST start per pod, and the whole POST phase in seconds."""
    clients = [
        await KubeClient.connect(ClientOptions(kubeconfig=str(kubeconfig))) for _ in range(CLIENTS)
    ]
    created: dict[str, float] = {}
    path = f"/api/v1/namespaces/{namespace}/pods"

    async def one_client(client: KubeClient, share: list[str]) -> None:
        for name in share:
            created[name] = time.monotonic()
            await client.create(path, pod(name, node))

    try:
        started = time.monotonic()
        await asyncio.gather(*(one_client(c, names[i::CLIENTS]) for i, c in enumerate(clients)))
        return created, time.monotonic() - started
    finally:
        for client in clients:
            await client.close()


@dataclass
class ServerCosts:
    """The API server's own CPU seconds and, by `VERB resource[/sub]`, the seconds and
    count of its requests (`apiserver_request_duration_seconds`), at one moment."""

    cpu: float
    seconds: dict[str, float]
    count: dict[str, float]

    def since(self, earlier: ServerCosts) -> tuple[float, dict[str, float]]:
        """CPU seconds spent since `earlier`, and the mean ms per request by verb and
        resource of the requests served since (those with at least 10)."""
        means = {}
        for key, n in self.count.items():
            served = n - earlier.count.get(key, 0)
            if served >= 10:
                spent = self.seconds[key] - earlier.seconds.get(key, 0)
                means[key] = 1000 * spent / served
        return self.cpu - earlier.cpu, means


async def apiserver_costs(client: KubeClient) -> ServerCosts:
    async with client.session.get(
        client.host + "/metrics", headers=await client._headers(None)
    ) as response:
        text = await response.text()
    cpu = 0.0
    seconds: Counter[str] = Counter()
    count: Counter[str] = Counter()
    for line in text.splitlines():
        if line.startswith("process_cpu_seconds_total "):
            cpu = float(line.split()[1])
        for suffix, into in (("_sum{", seconds), ("_count{", count)):
            prefix = "apiserver_request_duration_seconds" + suffix
            if line.startswith(prefix):
                labels_text, value = line[len(prefix) :].rsplit("} ", 1)
                labels = dict(
                    part.split("=", 1)
                    for part in labels_text.replace('"', "").split(",")
                    if "=" in part
                )
                if labels.get("resource") and labels.get("verb") != "WATCH":
                    sub = labels.get("subresource")
                    key = f"{labels['verb']} {labels['resource']}{'/' + sub if sub else ''}"
                    into[key] += float(value)
    return ServerCosts(cpu, dict(seconds), dict(count))


async def apiserver_pprof(client: KubeClient, to: Path, seconds: int) -> None:
    """The API server's CPU profile over the next `seconds`, written to `to`."""
    async with client.session.get(
        client.host + f"/debug/pprof/profile?seconds={seconds}",
        headers=await client._headers(None),
    ) as response:
        data = await response.read()
    to.parent.mkdir(parents=True, exist_ok=True)
    await asyncio.to_thread(to.write_bytes, data)


async def one_run(
    system: System,
    cluster: DevCluster,
    count: int,
    timeout: float,
    profile_to: Path | None = None,
    show_slowest: int = 0,
) -> Run:
    node = f"fresh-{system.name}"
    namespace = "bench"
    run = Run(system=system.name, pods=count)
    client = await KubeClient.connect(ClientOptions(kubeconfig=str(cluster.kubeconfig)))
    watch: PodWatch | None = None
    watcher: asyncio.Task[None] | None = None
    try:
        await client.create("/api/v1/namespaces", {"metadata": {"name": namespace}})
        await until(
            "default ServiceAccount",
            lambda: _exists(client, f"/api/v1/namespaces/{namespace}/serviceaccounts/default"),
            60,
        )
        watch = PodWatch(client, namespace)
        watcher = asyncio.create_task(watch.run())
        await system.start(client, node)
        assert system.process is not None
        pid = system.process.pid
        await until(f"{system.name} node Ready", lambda: node_ready(client, node), 120)
        await watch.ready.wait()
        await asyncio.sleep(2)
        cpu0 = cpu_seconds(pid)
        log_file = system.workdir / f"{system.name}-{node}.log"
        lines0 = _lines(log_file)
        before = await apiserver_requests_by_code(client)
        server0 = await apiserver_costs(client)
        names = [f"p{n:05d}" for n in range(count)]
        pprof = None
        if profile_to is not None:
            pprof = asyncio.create_task(apiserver_pprof(client, profile_to, 8))
            await asyncio.sleep(0.2)  # the profile has started when the creates come
        started = time.monotonic()
        created, run.post_phase = await create_with_clients(
            cluster.kubeconfig, namespace, names, node
        )
        server1 = await apiserver_costs(client)
        run.apiserver_cpu, run.server_ms = server1.since(server0)

        async def all_running() -> bool:
            return all(n in watch.running for n in names)

        try:
            await until("all Running", all_running, timeout)
        except TimeoutError:
            run.error = f"{sum(n in watch.running for n in names)}/{count} Running"
        run.running = sum(n in watch.running for n in names)
        run.seconds = max(watch.running.values(), default=started) - started
        run.latencies = sorted(watch.running[n] - created[n] for n in names if n in watch.running)
        slowest = sorted(names, key=lambda n: watch.running.get(n, 1e9) - created[n])
        for n in slowest[len(slowest) - show_slowest :] if show_slowest else []:
            at = watch.running.get(n)
            print(
                f"  slow: {n} POSTed at +{created[n] - started:.2f} s, Running at "
                + (f"+{at - started:.2f} s" if at else "never"),
                file=sys.stderr,
            )
        await asyncio.sleep(2)
        run.connections = api_connections(pid, cluster.server)
        middle = await apiserver_requests_by_code(client)
        deleting = time.monotonic()
        kubectl = await asyncio.create_subprocess_exec(
            str(cluster.access().kubectl),
            f"--kubeconfig={cluster.kubeconfig}",
            *("-n", namespace, "delete", "pods", "-l", LABEL, "--wait=false"),
            stdout=asyncio.subprocess.DEVNULL,
        )
        if await kubectl.wait():
            raise RuntimeError("kubectl delete failed")

        async def all_gone() -> bool:
            return all(n in watch.gone for n in names)

        try:
            await until("all deleted", all_gone, timeout)
            run.delete_seconds = max(watch.gone[n] for n in names) - deleting
        except TimeoutError:
            run.error += f" {sum(n in watch.gone for n in names)}/{count} deleted"
        await asyncio.sleep(3)  # trailing writes (Events) that belong to these pods
        after = await apiserver_requests_by_code(client)
        run.log_lines = _lines(log_file) - lines0
        run.cpu_seconds = cpu_seconds(pid) - cpu0
        run.peak_rss = peak_rss_mib(pid)
        run.create_requests = by_resource(middle - before)
        run.delete_requests = by_resource(after - middle)
        if pprof is not None:
            await pprof
    finally:
        if watcher is not None:
            watcher.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await watcher
        await system.stop()
        await client.close()
    return run


def api_connections(pid: int, server: str) -> int:
    """The agent's open TCP connections to the API server (each one a TLS handshake the
    API server did for it): its socket inodes matched in /proc/net/tcp and tcp6 by
    the server's port."""
    port = int(server.rsplit(":", 1)[1].strip("/"))
    inodes = set()
    fd_dir = Path(f"/proc/{pid}/fd")
    for fd in fd_dir.iterdir():
        with contextlib.suppress(OSError):
            target = os.readlink(fd)
            if target.startswith("socket:["):
                inodes.add(target[8:-1])
    count = 0
    for table in ("tcp", "tcp6"):
        with contextlib.suppress(OSError):
            for line in Path(f"/proc/{pid}/net/{table}").read_text().splitlines()[1:]:
                fields = line.split()
                remote_port = int(fields[2].rsplit(":", 1)[1], 16)
                if remote_port == port and fields[3] == "01" and fields[9] in inodes:
                    count += 1
    return count


def _lines(path: Path) -> int:
    """Lines the agent has logged so far (at its default level)."""
    try:
        with path.open("rb") as f:
            return sum(1 for _ in f)
    except FileNotFoundError:
        return 0


async def _exists(client: KubeClient, path: str) -> bool:
    try:
        await client.get(path)
    except ApiError:
        return False
    return True


def summary(runs: list[Run]) -> dict[str, float]:
    def med(values: list[float]) -> float:
        values = [v for v in values if v == v]
        return statistics.median(values) if values else float("nan")

    ok = [r for r in runs if r.running]
    out = {
        "pods/s to Running": med([r.running / r.seconds for r in ok if r.seconds]),
        "p50 POST→Running ms": med([pct(r.latencies, 50) * 1000 for r in ok]),
        "p99 POST→Running ms": med([pct(r.latencies, 99) * 1000 for r in ok]),
        "the clients' POST phase s": med([r.post_phase for r in ok]),
        "delete until every DELETED s": med([r.delete_seconds for r in ok]),
        "agent CPU s": med([r.cpu_seconds for r in ok]),
        "agent peak RSS MiB": med([r.peak_rss for r in ok]),
        "API server CPU s while the clients create": med([r.apiserver_cpu for r in ok]),
        "agent log lines per pod": med([r.log_lines / r.pods for r in ok]),
        "agent's TCP connections to the API server after the burst": med(
            [float(r.connections) for r in ok]
        ),
    }
    for key in sorted({k for r in ok for k in r.server_ms}):
        out[f"API server ms per {key}, while the clients create"] = med(
            [r.server_ms.get(key, float("nan")) for r in ok]
        )
    for step, pick in (("creating", "create_requests"), ("deleting", "delete_requests")):
        keys = sorted({k for r in ok for k in getattr(r, pick)})
        for k in keys:
            out[f"{k} per pod, {step}"] = med([getattr(r, pick)[k] / r.pods for r in ok])
    return out


def table(results: dict[str, dict[str, float]]) -> str:
    order = [s for s in SYSTEMS if s in results]
    measures = sorted({m for r in results.values() for m in r}, key=_measure_order)
    lines = [
        "| measure | " + " | ".join(order) + " | vkpy / kwok |",
        "|---" * (len(order) + 2) + "|",
    ]
    for m in measures:
        cells = [fmt(results[s].get(m, float("nan"))) for s in order]
        kwok = results.get("kwok", {}).get(m, float("nan"))
        vkpy = results.get("vkpy", {}).get(m, float("nan"))
        ratio = fmt(vkpy / kwok) if kwok and kwok == kwok else "—"
        lines.append(f"| {m} | " + " | ".join(cells) + f" | {ratio} |")
    return "\n".join(lines)


def _measure_order(measure: str) -> tuple[int, str]:
    return (1 if " per pod, " in measure else 0, measure)


def report(results: dict[str, dict[str, float]], runs: list[Run], args: argparse.Namespace) -> str:
    errors = [f"- {r.system}: {r.error.strip()}" for r in runs if r.error]
    per_run = "; ".join(f"{r.system} {r.running / r.seconds if r.seconds else 0:.0f}" for r in runs)
    return (
        f"### A fresh cluster per run, defaults, {CLIENTS} clients "
        f"({datetime.now(UTC):%Y-%m-%d %H:%M} UTC, {platform.machine()}, "
        f"{os.cpu_count()} cores, Python {platform.python_version()})\n\n"
        f"`python bench/fresh.py --pods {args.pods} --rounds {args.rounds}"
        + (f" --sim-platform-dir {args.sim_platform_dir}" if args.sim_platform_dir else "")
        + "`: each run on a "
        f"control plane of its own, started for it; {args.pods} bound pods created by "
        f"{CLIENTS} clients, then `kubectl delete --wait=false`; runs interleaved, medians. "
        f"pods/s per run in order: {per_run}. API requests per pod: the API server's "
        "counters, every client's (the benchmark's own creates and its one DELETE "
        "collection included).\n\n"
        + table(results)
        + "\n"
        + ("\nIncomplete runs:\n" + "\n".join(errors) + "\n" if errors else "")
    )


def bench(args: argparse.Namespace, workdir: Path) -> str:
    runs: list[Run] = []
    makers = {"vkpy": DefaultVkpy, "kwok": Kwok}
    for round_no in range(args.rounds):
        for name in args.systems:
            where = workdir / f"{name}-{round_no}"
            cluster = DevCluster(where / "cluster")
            print(f"round {round_no + 1}: {name}, a fresh control plane", file=sys.stderr)
            cluster.up()
            try:
                system = makers[name](cluster.kubeconfig, where, args)
                pprof = args.apiserver_pprof
                profile_to = pprof / f"{name}-{round_no}.pprof" if pprof else None
                run = asyncio.run(one_run(system, cluster, args.pods, args.timeout, profile_to))
            finally:
                cluster.down(purge=True)
            print(
                f"  {run.running} Running in {run.seconds:.1f} s, POST phase "
                f"{run.post_phase:.1f} s, agent CPU {run.cpu_seconds:.2f} s {run.error}",
                file=sys.stderr,
            )
            runs.append(run)
    results = {n: summary([r for r in runs if r.system == n]) for n in args.systems}
    return report(results, runs, args)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pods", type=int, default=1000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--systems", nargs="+", default=list(SYSTEMS), choices=SYSTEMS)
    parser.add_argument("--timeout", type=float, default=300, help="per step (s)")
    parser.add_argument("--event-loop", default="asyncio", help=argparse.SUPPRESS)
    parser.add_argument("--vkpy-arg", action="append", default=[], help=argparse.SUPPRESS)
    parser.add_argument(
        "--sim-platform-dir",
        type=Path,
        help="where the sim keeps its pod records (default: under vkpy's --state-dir), "
        "e.g. a tmpfs, to take their files' journal writes off the disk etcd syncs",
    )
    parser.add_argument(
        "--profile",
        type=Path,
        help="run vkpy under cProfile, one .prof per run into this folder (slows it)",
    )
    parser.add_argument(
        "--slowest",
        type=int,
        default=0,
        help="print this many of each run's slowest pods: when each was POSTed and seen Running",
    )
    parser.add_argument(
        "--apiserver-pprof",
        type=Path,
        help="a CPU profile of the API server over each burst, one file per run into this folder",
    )
    published.add_options(parser)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="vkpy-fresh-") as tmp:
        text = bench(args, Path(tmp))
    print(text)
    published.append(text, args)
    return 0


if __name__ == "__main__":
    sys.exit(main())
