"""A restart of vkpy on a node with many running pods: its memory and time (issue 17).

Issue 17 asks for the streaming initial list (`sendInitialEvents`) so that a start
with 10,000 pods does not hold the whole list twice: a LIST is one body held whole
and decoded whole next to the objects kept, while the stream hands over one pod at a
time. This measures it: N pods are started on a vkpy node (sim backend) and, once
all are Running, vkpy is stopped (SIGTERM) and started again, alternately with the
streaming list and with a LIST (`KUBE_FEATURE_WatchListClient=false`, client-go's
switch for it), `--rounds` times each. For each start: seconds until vkpy tracks all
N pods (its `vkpy_pods` gauge), the peak RSS of the new process by then and once
settled (VmHWM, /proc), its settled RSS, and its CPU for the start. Medians by mode.

    python bench/restart.py --pods 10000 --rounds 2

Traffic goes to 127.0.0.1 only. Starts its own control plane unless --kubeconfig.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import platform
import statistics
import sys
import time
from datetime import UTC, datetime
from pathlib import Path

import aiohttp
import published
from peers import PodWatch, Vkpy, create_all, node_ready, rss_mib
from pods import cpu_seconds, free_port, peak_rss_mib, until

from vkpy.devcluster import ClusterAccess
from vkpy.kube.client import ApiError, ClientOptions, KubeClient

MODES = {"streaming list": "true", "LIST": "false"}
SETTLE = 10.0


class Restarted(Vkpy):
    """vkpy with the WatchList switch in its environment and a metrics port."""

    watch_list = "true"
    metrics_port = 0

    def env(self) -> dict[str, str]:
        return {**os.environ, "KUBE_FEATURE_WatchListClient": self.watch_list}

    def argv(self, node: str) -> list[str]:
        self.metrics_port = free_port()
        return [*super().argv(node), f"--metrics-port={self.metrics_port}"]


async def tracked(session: aiohttp.ClientSession, port: int) -> float:
    """vkpy's own count of the pods it tracks (0 until its metrics answer)."""
    try:
        async with session.get(f"http://127.0.0.1:{port}/metrics") as response:
            text = await response.text()
    except aiohttp.ClientError:
        return 0.0
    for line in text.splitlines():
        if line.startswith("vkpy_pods "):
            return float(line.split()[1])
    return 0.0


async def one_start(
    system: Restarted, client: KubeClient, node: str, pods: int, timeout: float
) -> dict[str, float]:
    await system.stop()
    started = time.monotonic()
    await system.start(client, node)
    assert system.process is not None
    pid = system.process.pid
    async with aiohttp.ClientSession() as session:

        async def all_tracked() -> bool:
            return await tracked(session, system.metrics_port) >= pods

        await until("all pods tracked", all_tracked, timeout, interval=0.5)
    took = time.monotonic() - started
    peak_then = peak_rss_mib(pid)
    await asyncio.sleep(SETTLE)
    return {
        "seconds until all pods are tracked": took,
        "peak RSS by then, MiB": peak_then,
        f"peak RSS {SETTLE:g} s after, MiB": peak_rss_mib(pid),
        f"RSS {SETTLE:g} s after, MiB": rss_mib(pid),
        f"CPU seconds, the start and {SETTLE:g} s after": cpu_seconds(pid),
    }


async def bench(args: argparse.Namespace, access: ClusterAccess, workdir: Path) -> str:
    client = await KubeClient.connect(ClientOptions(kubeconfig=str(access.kubeconfig)))
    args.event_loop, args.vkpy_arg = "asyncio", []
    system = Restarted(access.kubeconfig, workdir, args)
    node = f"restart-{os.getpid()}"
    namespace = node
    await client.create("/api/v1/namespaces", {"metadata": {"name": namespace}})
    watch = PodWatch(client, namespace)
    watcher = asyncio.create_task(watch.run())
    results: dict[str, list[dict[str, float]]] = {mode: [] for mode in MODES}
    loads: list[str] = []
    try:
        await system.start(client, node)
        await until("node Ready", lambda: node_ready(client, node), 120)
        await watch.ready.wait()
        names = [f"r{n:06d}" for n in range(args.pods)]
        await create_all(client, namespace, names, node, bound=True)

        async def all_running() -> bool:
            return all(n in watch.running for n in names)

        await until("all Running", all_running, args.timeout, interval=1.0)
        for _ in range(args.rounds):
            for mode, switch in MODES.items():
                loads.append(f"{os.getloadavg()[0]:.1f}")
                system.watch_list = switch
                measured = await one_start(system, client, node, args.pods, args.timeout)
                results[mode].append(measured)
                print(mode, {k: round(v, 1) for k, v in measured.items()}, flush=True)
        assert all(n in watch.running and n not in watch.gone for n in names)
    finally:
        watcher.cancel()
        await system.stop()
        for path in (f"/api/v1/namespaces/{namespace}", f"/api/v1/nodes/{node}"):
            with contextlib.suppress(ApiError):
                await client.request("DELETE", path, query={"gracePeriodSeconds": 0})
        await client.close()
    return report(results, loads, args)


def report(
    results: dict[str, list[dict[str, float]]], loads: list[str], args: argparse.Namespace
) -> str:
    stream, listed = results["streaming list"], results["LIST"]
    rows = []
    for measure in stream[0]:
        a = statistics.median(r[measure] for r in stream)
        b = statistics.median(r[measure] for r in listed)
        rows.append(f"| {measure} | {a:.1f} | {b:.1f} | {a / b:.2f} |")
    return (
        f"### Restarting vkpy on a node with {args.pods} pods "
        f"({datetime.now(UTC):%Y-%m-%d %H:%M} UTC, {platform.machine()}, "
        f"{os.cpu_count()} cores, Python {platform.python_version()})\n\n"
        f"`python bench/restart.py --pods {args.pods} --rounds {args.rounds}` (sim backend; "
        "each start alternately with the streaming list and with a LIST, "
        "`KUBE_FEATURE_WatchListClient=false`; medians; load average at each start: "
        f"{', '.join(loads)})\n\n"
        "| measure | streaming list | LIST | streaming / LIST |\n|---|---|---|---|\n"
        + "\n".join(rows)
        + "\n"
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pods", type=int, default=10000)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--timeout", type=float, default=1800, help="to all Running (s)")
    parser.add_argument("--kubeconfig", type=Path, help="existing cluster (default: start one)")
    published.add_options(parser)
    return published.run_on_a_cluster(parser.parse_args(), "vkpy-restart-", bench)


if __name__ == "__main__":
    sys.exit(main())
