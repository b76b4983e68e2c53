"""One node with many running pods: its memory, and the kubelet API under churn (issue 17).

The target: one node with 10,000 running pods, settled RSS under 400 MiB, and the
kubelet API's `/pods` and `kubectl logs` answering in under 100 ms p99 while pods
churn at 100 a second. Steps:

1. vkpy (sim backend) on a node of its own; N pods created with nodeName set (32 at a
   time); wait until the bench's watch sees all Running; RSS 5 s later (settled).
2. Churn for `--seconds`: every tenth of a second `--churn`/10 new pods are created
   and as many of the oldest deleted, so N stay (the rate reached is reported: on a
   loaded machine the API server may not keep up). Meanwhile, one after another:
   GET /pods straight to vkpy's port (the admin's client certificate, as the API
   server would ask), GET /containerLogs of a running pod straight to vkpy, and
   `kubectl logs --tail=10` of a running pod through the API server (kubectl's own
   start included, so it is the user's wall time, not vkpy's).
3. p50/p99 of each, RSS during and after the churn, vkpy's CPU.

Traffic goes to 127.0.0.1 only. Starts its own control plane unless --kubeconfig.

    python bench/big_node.py --pods 10000 --churn 100 --seconds 60
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from collections import deque
from datetime import UTC, datetime
from pathlib import Path

import aiohttp
import published
from kubelet_api import admin_context
from peers import PodWatch, Vkpy, create_all, node_ready, rss_mib
from pods import cpu_seconds, peak_rss_mib, until

from vkpy.devcluster import ClusterAccess, given_or_started
from vkpy.kube.client import ApiError, ClientOptions, KubeClient

ROOT = Path(__file__).resolve().parents[1]


def quantiles(samples: list[float]) -> str:
    if len(samples) < 2:
        return "—"
    q = statistics.quantiles(samples, n=100)
    return f"{q[49] * 1000:.0f} / {q[98] * 1000:.0f} ms ({len(samples)} requests)"


async def churn(
    client: KubeClient,
    namespace: str,
    node: str,
    live: deque[str],
    rate: float,
    seconds: float,
    counts: dict[str, int],
) -> None:
    """Create `rate` pods a second and delete as many of the oldest, for `seconds`."""
    gate = asyncio.Semaphore(32)
    tasks: set[asyncio.Task[None]] = set()
    serial = 0

    async def delete(name: str) -> None:
        async with gate:
            with contextlib.suppress(ApiError):
                await client.delete(f"/api/v1/namespaces/{namespace}/pods/{name}")
                counts["deleted"] += 1

    async def create(name: str) -> None:
        async with gate:
            await create_all(client, namespace, [name], node, bound=True)
            counts["created"] += 1
            live.append(name)

    end = time.monotonic() + seconds
    tick = 0.1
    while time.monotonic() < end:
        started = time.monotonic()
        for _ in range(round(rate * tick)):
            serial += 1
            tasks.add(asyncio.create_task(create(f"c{serial:06d}")))
            if live:
                tasks.add(asyncio.create_task(delete(live.popleft())))
        tasks = {t for t in tasks if not t.done()}
        await asyncio.sleep(max(0.0, tick - (time.monotonic() - started)))
    await asyncio.gather(*tasks)


DURATION = "vkpy_kubelet_api_request_duration_seconds_bucket"
GC_PAUSE = "vkpy_gc_pause_seconds_bucket"
SERVER_ROUTES = ("/pods", "/containerLogs/{namespace}/{pod}/{container}")


async def handler_buckets(
    session: aiohttp.ClientSession, base: str
) -> dict[tuple[str, str], float]:
    """vkpy's own histogram of its handlers' time, by (route, bucket bound): the time a
    request spends in vkpy once its handler runs (not the queue before, nor the write)."""
    async with session.get(base + "/metrics") as response:
        text = await response.text()
    out: dict[tuple[str, str], float] = {}
    for line in text.splitlines():
        if not line.startswith(DURATION + "{"):
            continue
        labels, _, value = line[len(DURATION) + 1 :].rpartition("} ")
        fields = dict(part.split("=", 1) for part in labels.split(","))
        out[(fields["route"].strip('"'), fields["le"].strip('"'))] = float(value)
    for line in text.splitlines():  # the collector's full pauses, as route "gc"
        if line.startswith(GC_PAUSE + "{") and 'generation="2"' in line:
            labels, _, value = line[len(GC_PAUSE) + 1 :].rpartition("} ")
            bound = labels.split('le="', 1)[1].split('"', 1)[0]
            out[("gc", bound)] = float(value)
    return out


def handler_share(
    before: dict[tuple[str, str], float], after: dict[tuple[str, str], float], route: str
) -> str:
    def delta(bound: str) -> float:
        return after.get((route, bound), 0.0) - before.get((route, bound), 0.0)

    total = delta("+Inf")
    if not total:
        return "—"
    shares = ", ".join(
        f"{delta(b) / total:.0%} within {float(b) * 1000:.0f} ms" for b in ("0.025", "0.1", "1.0")
    )
    return f"{shares} ({total:.0f} requests)"


async def loop_lag(samples: list[float], until_done: asyncio.Task[None]) -> None:
    """How late the bench's own event loop wakes from a 50 ms sleep: its requests'
    times include this much of the bench's own queueing (watch, churn, reads)."""
    while not until_done.done():
        began = time.perf_counter()
        await asyncio.sleep(0.05)
        samples.append(time.perf_counter() - began - 0.05)


async def kubectl_logs(access: ClusterAccess, namespace: str, name: str) -> float:
    argv = access.kubectl_argv("logs", "-n", namespace, name, "--tail=10")
    started = time.perf_counter()
    await asyncio.to_thread(subprocess.run, argv, capture_output=True, check=True)
    return time.perf_counter() - started


async def bench(args: argparse.Namespace, access: ClusterAccess, workdir: Path) -> dict[str, str]:
    client = await KubeClient.connect(ClientOptions(kubeconfig=str(access.kubeconfig)))
    args.event_loop, args.vkpy_arg = "asyncio", []
    system = Vkpy(access.kubeconfig, workdir, args)
    node = f"big-{os.getpid()}"
    namespace = node
    out: dict[str, str] = {"pods": str(args.pods), "load at start": f"{os.getloadavg()[0]:.1f}"}
    await client.create("/api/v1/namespaces", {"metadata": {"name": namespace}})
    watch = PodWatch(client, namespace)
    watcher = asyncio.create_task(watch.run())
    session = aiohttp.ClientSession(
        connector=aiohttp.TCPConnector(ssl=admin_context(access.kubeconfig, workdir))
    )
    try:
        await system.start(client, node)
        assert system.process is not None
        pid = system.process.pid
        port = next(a.split("=", 1)[1] for a in system.last_argv if a.startswith("--port="))
        await until("node Ready", lambda: node_ready(client, node), 120)
        await watch.ready.wait()
        names = [f"b{n:06d}" for n in range(args.pods)]
        cpu0, started = cpu_seconds(pid), time.monotonic()
        await create_all(client, namespace, names, node, bound=True)

        async def all_running() -> bool:
            return all(n in watch.running for n in names)

        await until("all Running", all_running, args.timeout, interval=1.0)
        took = max(watch.running[n] for n in names) - started
        out["seconds to all Running"] = f"{took:.0f} ({args.pods / took:.1f} pods/s)"
        out["vkpy CPU for the burst"] = f"{cpu_seconds(pid) - cpu0:.1f} s"
        await asyncio.sleep(5)
        out["settled RSS"] = f"{rss_mib(pid):.1f} MiB"

        live: deque[str] = deque(names)
        counts = {"created": 0, "deleted": 0}
        pods_times: list[float] = []
        log_times: list[float] = []
        kubectl_times: list[float] = []
        rss_during: list[float] = []
        base = f"https://127.0.0.1:{port}"
        cpu1 = cpu_seconds(pid)
        load = f"{os.getloadavg()[0]:.1f}"
        buckets0 = await handler_buckets(session, base)
        lags: list[float] = []
        churning = asyncio.create_task(
            churn(client, namespace, node, live, args.churn, args.seconds, counts)
        )
        failures = {"pods": 0, "logs": 0, "kubectl": 0}

        def running_pod() -> str:
            return live[len(live) // 2] if live else names[-1]

        async def timed(what: str, times: list[float], url: str) -> None:
            while not churning.done():
                began = time.perf_counter()
                async with session.get(url.format(pod=running_pod())) as response:
                    await response.read()
                if response.status == 200:
                    times.append(time.perf_counter() - began)
                else:
                    failures[what] += 1
                await asyncio.sleep(0.1)

        async def through_kubectl() -> None:
            while not churning.done():
                try:
                    kubectl_times.append(await kubectl_logs(access, namespace, running_pod()))
                except subprocess.CalledProcessError:
                    failures["kubectl"] += 1

        async def memory() -> None:
            while not churning.done():
                rss_during.append(rss_mib(pid))
                await asyncio.sleep(0.5)

        logs_url = base + f"/containerLogs/{namespace}/{{pod}}/app?tailLines=10"
        await asyncio.gather(
            timed("pods", pods_times, base + "/pods"),
            timed("logs", log_times, logs_url),
            through_kubectl(),
            memory(),
            loop_lag(lags, churning),
        )
        await churning
        buckets1 = await handler_buckets(session, base)
        out["churn"] = (
            f"{counts['created'] / args.seconds:.1f} created and "
            f"{counts['deleted'] / args.seconds:.1f} deleted a second (asked {args.churn}), "
            f"load average {load} at its start"
        )
        out["GET /pods straight to vkpy p50 / p99"] = quantiles(pods_times)
        out["GET /containerLogs straight to vkpy p50 / p99"] = quantiles(log_times)
        out["kubectl logs --tail=10 (wall, kubectl start included) p50 / p99"] = quantiles(
            kubectl_times
        )
        for route in SERVER_ROUTES:
            out[f"vkpy's handler time for {route} (its own histogram)"] = handler_share(
                buckets0, buckets1, route
            )
        out["vkpy's full garbage collections (generation 2) during the churn"] = handler_share(
            buckets0, buckets1, "gc"
        ).replace("requests", "collections")
        out["the bench's own event loop late by, p50 / p99"] = quantiles(lags).replace(
            "requests", "samples"
        )
        out["requests that failed (pods, logs, kubectl)"] = str(tuple(failures.values()))
        out["vkpy CPU during the churn"] = (
            f"{(cpu_seconds(pid) - cpu1) / args.seconds * 100:.0f}% of one core"
        )
        out["RSS during the churn, max"] = f"{max(rss_during):.1f} MiB"
        out["RSS after the churn"] = f"{rss_mib(pid):.1f} MiB"
        out["peak RSS"] = f"{peak_rss_mib(pid):.1f} MiB"
    finally:
        watcher.cancel()
        await session.close()
        await system.stop()
        for path in (f"/api/v1/namespaces/{namespace}", f"/api/v1/nodes/{node}"):
            with contextlib.suppress(ApiError):
                await client.request("DELETE", path, query={"gracePeriodSeconds": 0})
        await client.close()
    return out


def report(out: dict[str, str], args: argparse.Namespace) -> str:
    rows = "\n".join(f"| {k} | {v} |" for k, v in out.items())
    return (
        f"### One node, {args.pods} pods, churn {args.churn}/s "
        f"({datetime.now(UTC):%Y-%m-%d %H:%M} UTC, {platform.machine()}, "
        f"{os.cpu_count()} cores, Python {platform.python_version()})\n\n"
        f"`python bench/big_node.py --pods {args.pods} --churn {args.churn} "
        f"--seconds {args.seconds:g}` (sim backend; targets: settled RSS < 400 MiB, "
        "/pods and kubectl logs p99 < 100 ms under 100 pods/s churn)\n\n"
        "| measure | value |\n|---|---|\n" + rows + "\n"
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pods", type=int, default=10000)
    parser.add_argument("--churn", type=float, default=100, help="pods created (and deleted) /s")
    parser.add_argument("--seconds", type=float, default=60)
    parser.add_argument("--timeout", type=float, default=1800, help="to all Running (s)")
    parser.add_argument("--kubeconfig", type=Path, help="existing cluster (default: start one)")
    published.add_options(parser)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="vkpy-big-") as tmp:
        workdir = Path(tmp)
        with given_or_started(args.kubeconfig, workdir) as access:
            out = asyncio.run(bench(args, access, workdir))
    text = report(out, args)
    print(text)
    published.append(text, args)
    return 0


if __name__ == "__main__":
    sys.exit(main())
