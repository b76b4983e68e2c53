"""One node with many running pods: its memory, and the kubelet API under churn (issue 17).

The target: one node with 10,000 running pods, settled RSS under 400 MiB, and the
kubelet API's `/pods` and `kubectl logs` answering in under 100 ms p99 while pods
churn at 100 a second. Steps:

1. vkpy (sim backend) on a node of its own; N pods created with nodeName set (32 at a
   time); wait until the bench's watch sees all Running; RSS 5 s later (settled).
2. Churn for `--seconds`: every tenth of a second `--churn`/10 new pods are created
   and as many of the oldest deleted, so N stay (the rate reached is reported: on a
   loaded machine the API server may not keep up). Meanwhile four timing clients,
   each a process of its own (bench/api_probe.py) so that no timing waits behind this
   process's churn and its watch of N pods, ask one after another about a running pod
   (its name sent to them twice a second): GET /pods straight to vkpy's port (the
   admin's client certificate, as the API server would ask), GET /containerLogs
   straight to vkpy, GET pods/log through the API server (the request `kubectl logs`
   makes and waits for), and `kubectl logs --tail=10` (wall time, kubectl's own
   process start included: the user's wait, not vkpy's).
3. p50/p99 of each, vkpy's own handler and collector histograms, how late each
   client's own loop was, RSS during and after the churn, vkpy's CPU.

Traffic goes to 127.0.0.1 only. Starts its own control plane unless --kubeconfig.

    python bench/big_node.py --pods 10000 --churn 100 --seconds 60
    python bench/big_node.py --pods 10000 --churn 100 --seconds 60 --vkpy-cpus 1

`--vkpy-cpus` gives vkpy CPUs of its own (bench/cpu_split.py), as in a cluster where
vkpy's pod is not sharing the API server's cores. `--pods-client curl` times `/pods`
with curl (C and OpenSSL, as a Go client reads it) instead of Python's TLS, whose own
cost reading 22 MB is part of the default figure.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import platform
import statistics
import sys
import time
from collections import deque
from datetime import UTC, datetime
from pathlib import Path

import aiohttp
import published
from cpu_split import parse_cpus, split
from kubelet_api import admin_context
from peers import PodWatch, Vkpy, create_all, node_ready, rss_mib
from pods import cpu_seconds, peak_rss_mib, until

from vkpy.devcluster import ClusterAccess
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
LOOP_LAG = "vkpy_event_loop_lag_seconds_bucket"
SERVER_ROUTES = ("/pods", "/containerLogs/{namespace}/{pod}/{container}")


async def scrape(session: aiohttp.ClientSession, base: str) -> str:
    """vkpy's /metrics, once per snapshot (the parsers below read the same text)."""
    async with session.get(base + "/metrics") as response:
        return await response.text()


def handler_buckets(text: str) -> dict[tuple[str, str], float]:
    """vkpy's own histogram of its handlers' time, by (route, bucket bound): the time a
    request spends in vkpy once its handler runs (not the queue before, nor the write)."""
    out: dict[tuple[str, str], float] = {}
    for line in text.splitlines():
        if not line.startswith(DURATION + "{"):
            continue
        labels, _, value = line[len(DURATION) + 1 :].rpartition("} ")
        fields = dict(part.split("=", 1) for part in labels.split(","))
        out[(fields["route"].strip('"'), fields["le"].strip('"'))] = float(value)
    for line in text.splitlines():  # how late vkpy's loop ran what was ready, as "loop"
        if line.startswith(LOOP_LAG + "{"):
            bound = line.split('le="', 1)[1].split('"', 1)[0]
            out[("loop", bound)] = float(line.rpartition(" ")[2])
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


PROBES = {
    "pods": "GET /pods straight to vkpy p50 / p99",
    "logs": "GET /containerLogs straight to vkpy p50 / p99",
    "apiserver-logs": "GET pods/log through the API server (what kubectl logs waits for) p50 / p99",
    "apiserver-pod": "GET of the same pod from the API server (never reaches vkpy: the API "
    "server's own time) p50 / p99",
    "kubectl": "kubectl logs --tail=10, wall time including kubectl's process start, p50 / p99",
}


async def start_probe(
    what: str, base: str, access: ClusterAccess, namespace: str, workdir: Path
) -> asyncio.subprocess.Process:
    """One timing client in a process of its own (bench/api_probe.py)."""
    return await asyncio.create_subprocess_exec(
        sys.executable,
        str(Path(__file__).with_name("api_probe.py")),
        what,
        f"--kubelet={base}",
        f"--kubeconfig={access.kubeconfig}",
        f"--kubectl={access.kubectl}",
        f"--namespace={namespace}",
        f"--workdir={workdir / ('probe-' + what)}",
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE,
    )


def gc_pauses(text: str) -> dict[tuple[str, str], float]:
    """vkpy's `vkpy_gc_pause_seconds` by (generation, bucket bound or "sum")."""
    out: dict[tuple[str, str], float] = {}
    for line in text.splitlines():
        if not line.startswith("vkpy_gc_pause_seconds"):
            continue
        name, _, value = line.rpartition(" ")
        generation = name.split('generation="', 1)[1].split('"', 1)[0]
        if "_bucket{" in name:
            out[(generation, name.split('le="', 1)[1].split('"', 1)[0])] = float(value)
        elif name.startswith("vkpy_gc_pause_seconds_sum"):
            out[(generation, "sum")] = float(value)
    return out


def gc_summary(
    before: dict[tuple[str, str], float], after: dict[tuple[str, str], float], generation: str
) -> str:
    """How many collections, their total, and the bucket bound the longest fell under."""

    def delta(key: str) -> float:
        return after.get((generation, key), 0.0) - before.get((generation, key), 0.0)

    count = delta("+Inf")
    if not count:
        return "none"
    bounds = sorted(
        (float(k[1]), k[1]) for k in after if k[0] == generation and k[1] not in ("sum", "+Inf")
    )
    longest = next((f"{b * 1000:g} ms" for b, key in bounds if delta(key) >= count), "over 10 s")
    return f"{count:.0f}, {delta('sum') * 1000:.0f} ms in all, the longest under {longest}"


def collector_state(text: str) -> tuple[float, float]:
    """vkpy's frozen objects and full collections so far (vkpy_gc_frozen_objects,
    vkpy_gc_full_collections_total)."""
    values = {"vkpy_gc_frozen_objects": 0.0, "vkpy_gc_full_collections_total": 0.0}
    for line in text.splitlines():
        name, _, value = line.partition(" ")
        if name in values:
            values[name] = float(value)
    return values["vkpy_gc_frozen_objects"], values["vkpy_gc_full_collections_total"]


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
        if args.vkpy_cpus:
            out["CPUs"] = split(pid, parse_cpus(args.vkpy_cpus))
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
        base = f"https://127.0.0.1:{port}"
        metrics0 = await scrape(session, base)
        frozen0, full0 = collector_state(metrics0)
        out["vkpy's frozen objects and full collections after the burst"] = (
            f"{frozen0:,.0f} objects, {full0:.0f} full collections"
        )

        live: deque[str] = deque(names)
        counts = {"created": 0, "deleted": 0}
        rss_during: list[float] = []
        cpu1 = cpu_seconds(pid)
        load = f"{os.getloadavg()[0]:.1f}"
        buckets0, gc0 = handler_buckets(metrics0), gc_pauses(metrics0)
        probes = {
            what: await start_probe(
                "pods-curl" if what == "pods" and args.pods_client == "curl" else what,
                base,
                access,
                namespace,
                workdir,
            )
            for what in PROBES
        }
        churning = asyncio.create_task(
            churn(client, namespace, node, live, args.churn, args.seconds, counts)
        )
        lags: list[float] = []

        async def feed() -> None:
            """A running pod's name to every probe, twice a second (the oldest are
            deleted first, so the middle one stays for a while)."""
            while not churning.done():
                name = (live[len(live) // 2] if live else names[-1]) + "\n"
                for probe in probes.values():
                    assert probe.stdin is not None
                    probe.stdin.write(name.encode())
                await asyncio.sleep(0.5)
            for probe in probes.values():
                assert probe.stdin is not None
                probe.stdin.close()

        async def memory() -> None:
            while not churning.done():
                rss_during.append(rss_mib(pid))
                await asyncio.sleep(0.5)

        await asyncio.gather(feed(), memory(), loop_lag(lags, churning))
        await churning
        results = {what: json.loads((await p.communicate())[0]) for what, p in probes.items()}
        metrics1 = await scrape(session, base)
        buckets1, gc1 = handler_buckets(metrics1), gc_pauses(metrics1)
        out["churn"] = (
            f"{counts['created'] / args.seconds:.1f} created and "
            f"{counts['deleted'] / args.seconds:.1f} deleted a second (asked {args.churn}), "
            f"load average {load} at its start, {os.getloadavg()[0]:.1f} at its end"
        )
        for what, label in PROBES.items():
            out[label] = quantiles(results[what]["times"])
            if what == "pods":
                out["GET /pods straight to vkpy, time to the response headers, p50 / p99"] = (
                    quantiles(results[what]["headers"])
                )
        for route in SERVER_ROUTES:
            out[f"vkpy's handler time for {route} (its own histogram)"] = handler_share(
                buckets0, buckets1, route
            )
        out["vkpy's event loop late by (a 0.1 s sleep's wake-up, its own histogram)"] = (
            handler_share(buckets0, buckets1, "loop").replace("requests", "samples")
        )
        for generation in ("0", "1", "2"):
            out[f"vkpy's garbage collections of generation {generation} during the churn"] = (
                gc_summary(gc0, gc1, generation)
            )
        probes = "(pods, logs, API server logs, API server pod, kubectl)"
        out[f"each probe's own event loop late by, p99 {probes}"] = ", ".join(
            quantiles(results[w]["lateness"]).split(" (")[0].split(" / ")[-1] for w in PROBES
        )
        out["the bench's own event loop (churn and watch) late by, p50 / p99"] = quantiles(
            lags
        ).replace("requests", "samples")
        out[f"requests that failed {probes}"] = str(tuple(results[w]["failures"] for w in PROBES))
        out["vkpy CPU during the churn"] = (
            f"{(cpu_seconds(pid) - cpu1) / args.seconds * 100:.0f}% of one core"
        )
        out["RSS during the churn, max"] = f"{max(rss_during):.1f} MiB"
        frozen1, full1 = collector_state(metrics1)
        out["vkpy's frozen objects at the churn's end, and full collections during it"] = (
            f"{frozen1:,.0f} objects, {full1 - full0:.0f} full collections"
        )
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
    cpus = f" --vkpy-cpus {args.vkpy_cpus}" if args.vkpy_cpus else ""
    cpus += " --pods-client curl" if args.pods_client == "curl" else ""
    return (
        f"### One node, {args.pods} pods, churn {args.churn}/s "
        f"({datetime.now(UTC):%Y-%m-%d %H:%M} UTC, {platform.machine()}, "
        f"{os.cpu_count()} cores, Python {platform.python_version()})\n\n"
        f"`python bench/big_node.py --pods {args.pods} --churn {args.churn} "
        f"--seconds {args.seconds:g}{cpus}` (sim backend; targets: settled RSS < 400 MiB, "
        "/pods and kubectl logs p99 < 100 ms under 100 pods/s churn)\n\n"
        "| measure | value |\n|---|---|\n" + rows + "\n"
    )


async def reported(args: argparse.Namespace, access: ClusterAccess, workdir: Path) -> str:
    return report(await bench(args, access, workdir), args)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pods", type=int, default=10000)
    parser.add_argument("--churn", type=float, default=100, help="pods created (and deleted) /s")
    parser.add_argument("--seconds", type=float, default=60)
    parser.add_argument("--timeout", type=float, default=1800, help="to all Running (s)")
    parser.add_argument("--kubeconfig", type=Path, help="existing cluster (default: start one)")
    parser.add_argument(
        "--vkpy-cpus",
        help="CPUs for vkpy alone, e.g. 1 (as its pod's CPU request would give it); the "
        "control plane and the clients run on the others (bench/cpu_split.py)",
    )
    parser.add_argument(
        "--pods-client",
        choices=["python", "curl"],
        default="python",
        help="what times GET /pods: Python's aiohttp (default) or curl (bench/api_probe.py)",
    )
    published.add_options(parser)
    return published.run_on_a_cluster(parser.parse_args(), "vkpy-big-", reported)


if __name__ == "__main__":
    sys.exit(main())
