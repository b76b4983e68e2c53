"""Many nodes from one process: what N sim nodes cost (issue 17).

Starts `python -m vkpy --nodes N --provider sim`, waits until all N nodes are Ready,
optionally binds P pods to each, then watches a steady window and reports: time to
all Ready, the agent's CPU (share of one core) and RSS (settled and peak), per node,
the API requests per second the agent's nodes cost the API server by verb and
resource (from the API server's own counters, so a shared cluster adds its noise),
and how late the Leases were (the kubelet's renew interval is 10 s: a Lease older
than 11 s at any look is late).

    python bench/nodes.py --nodes 1000 --window 60
"""

from __future__ import annotations

import argparse
import asyncio
import os
import platform
import re
import sys
import tempfile
import time
import urllib.request
from collections import Counter
from datetime import UTC, datetime
from pathlib import Path

import published
from pods import (
    apiserver_requests_by_code,
    cpu_seconds,
    create_bound_pods,
    free_port,
    parse_time,
    peak_rss_mib,
    ready_count,
    without_codes,
)

from vkpy.devcluster import given_or_started
from vkpy.devcluster.state import free_port_range
from vkpy.kube.client import ClientOptions, KubeClient

ROOT = Path(__file__).resolve().parents[1]


def rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


async def late_leases(client: KubeClient, prefix: str, limit: float) -> tuple[int, float]:
    """(leases older than `limit` s, the oldest age) among this run's nodes."""
    leases = await client.get("/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases")
    now = datetime.now(UTC)
    ages = [
        (now - parse_time(lease["spec"]["renewTime"])).total_seconds()
        for lease in leases.get("items", [])
        if lease["metadata"]["name"].startswith(prefix + "-")
    ]
    return sum(1 for a in ages if a > limit), max(ages, default=0.0)


def agent_requests(port: int) -> Counter[str]:
    """The agent's own count of API requests by method and answer (vkpy_api_requests_total)."""
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=30) as got:
        text = got.read().decode()
    counts: Counter[str] = Counter()
    for labels, value in re.findall(r"^vkpy_api_requests_total\{(.*)\} (\S+)$", text, re.M):
        fields = dict(re.findall(r'(\w+)="([^"]*)"', labels))
        counts[f"{fields.get('method')} {fields.get('code')}"] += int(float(value))
    return counts


async def bench(args: argparse.Namespace, kubeconfig: Path, workdir: Path) -> dict[str, object]:
    client = await KubeClient.connect(ClientOptions(kubeconfig=str(kubeconfig)))
    prefix = f"bn{os.getpid()}"
    selector = f"vkpy.io/bench={prefix}"
    log = (workdir / "agent.log").open("wb")
    metrics_port = free_port()
    agent = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "vkpy",
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
        stdout=log,
        stderr=log,
    )
    namespace = f"{prefix}-pods"
    try:
        started = time.monotonic()
        cpu0 = cpu_seconds(agent.pid)
        while (ready := await ready_count(client, selector)) < args.nodes:
            if agent.returncode is not None:
                raise RuntimeError("the agent exited; see its log")
            if time.monotonic() - started > args.timeout:
                break  # reported: how many were Ready, and how many during the window
            await asyncio.sleep(2)
        all_ready = time.monotonic() - started
        register_cpu = cpu_seconds(agent.pid) - cpu0
        if args.pods_per_node:
            count = args.nodes * args.pods_per_node
            bindings = [(f"p{n:06d}", f"{prefix}-{n % args.nodes}") for n in range(count)]
            await create_bound_pods(client, namespace, bindings, 32)
        await asyncio.sleep(args.settle)
        before = await apiserver_requests_by_code(client)
        agent_before = agent_requests(metrics_port)
        cpu_before = cpu_seconds(agent.pid)
        window_start = time.monotonic()
        late, oldest = 0, 0.0
        fewest_ready = args.nodes
        while time.monotonic() - window_start < args.window:
            await asyncio.sleep(min(5.0, args.window))
            count, age = await late_leases(client, prefix, 11.0)
            late, oldest = max(late, count), max(oldest, age)
            fewest_ready = min(fewest_ready, await ready_count(client, selector))
        elapsed = time.monotonic() - window_start
        after = await apiserver_requests_by_code(client)
        agent_after = agent_requests(metrics_port)
        cpu = cpu_seconds(agent.pid) - cpu_before
        rss = rss_mib(agent.pid)
        peak = peak_rss_mib(agent.pid)
    except BaseException:
        print((workdir / "agent.log").read_text(errors="replace")[-5000:], file=sys.stderr)
        raise
    finally:
        if agent.returncode is None:
            agent.terminate()
            await asyncio.wait_for(agent.wait(), timeout=60)
        if args.pods_per_node:
            await client.request(
                "DELETE", f"/api/v1/namespaces/{namespace}", query={"gracePeriodSeconds": 0}
            )
        await client.request("DELETE", "/api/v1/nodes", query={"labelSelector": selector})
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
        "nodes": args.nodes,
        "pods": args.nodes * args.pods_per_node,
        "event_loop": args.event_loop,
        "ready_at_start": ready,
        "seconds_to_that": round(all_ready, 1),
        "fewest_ready_in_window": fewest_ready,
        "registration_cpu_seconds": round(register_cpu, 1),
        "window_seconds": round(elapsed),
        "agent_cpu_share_of_one_core": round(cpu / elapsed, 3),
        "agent_cpu_ms_per_node_per_minute": round(cpu * 1000 / args.nodes / elapsed * 60, 2),
        "agent_rss_mib": round(rss, 1),
        "agent_peak_rss_mib": round(peak, 1),
        "rss_kib_per_node": round(rss * 1024 / args.nodes, 1),
        "late_leases_at_worst": late,
        "oldest_lease_age_seconds": round(oldest, 1),
        "api_requests_per_second": round(sum(delta.values()) / elapsed, 1),
        "by_verb_and_resource_per_second": rates,
        "lease_puts_per_second_by_code": {
            code: round(n / elapsed, 2) for code, n in lease_puts.most_common()
        },
        "agent_requests_per_second_by_method_and_code": {
            key: round(n / elapsed, 2) for key, n in (agent_after - agent_before).most_common()
        },
    }


def report(result: dict[str, object], load: str) -> str:
    rows = "\n".join(f"| {k} | {v} |" for k, v in result.items())
    return (
        f"### Many nodes in one process ({datetime.now(UTC):%Y-%m-%d %H:%M} UTC, "
        f"{platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}, "
        f"load average {load})\n\n"
        f"`python bench/nodes.py --nodes {result['nodes']}` (sim backend; API requests from "
        "the API server's counters over the window: the whole cluster's)\n\n"
        "| measure | value |\n|---|---|\n" + rows + "\n"
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=1000)
    parser.add_argument("--pods-per-node", type=int, default=0)
    parser.add_argument("--window", type=float, default=60, help="steady window (s)")
    parser.add_argument("--settle", type=float, default=15, help="wait before the window (s)")
    parser.add_argument("--timeout", type=float, default=600)
    parser.add_argument("--event-loop", default="asyncio", choices=["asyncio", "uvloop"])
    parser.add_argument("--kubeconfig", type=Path, help="existing cluster (default: start one)")
    published.add_options(parser)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="vkpy-bench-") as tmp:
        workdir = Path(tmp)
        with given_or_started(args.kubeconfig, workdir) as access:
            result = asyncio.run(bench(args, access.kubeconfig, workdir))
    load = " ".join(f"{x:.1f}" for x in os.getloadavg())
    text = report(result, load)
    print(text)
    published.append(text, args)
    return 0


if __name__ == "__main__":
    sys.exit(main())
