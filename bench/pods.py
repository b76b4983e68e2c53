"""Pod throughput benchmark: N pods created in a burst, sim backend with no latency.

Measures what the issue asks for and writes it to docs/benchmarks.md:
time until all pods are Running, pods/s, create->Running latency percentiles,
API writes per pod the agent needed (from the API server's own request counters),
and the agent's peak RSS. Starts its own local control plane unless --kubeconfig
is given (then the API-server counters include whatever else runs there).

    python bench/pods.py --pods 1000
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import pstats
import socket
import statistics
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import published

from vkpy.devcluster import given_or_started
from vkpy.kube.client import ApiError, ClientOptions, KubeClient

ROOT = Path(__file__).resolve().parents[1]
WRITES = ("POST", "PUT", "PATCH", "DELETE")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def pod(name: str, node: str) -> dict[str, object]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name},
        "spec": {
            "nodeName": node,
            "restartPolicy": "Never",
            "containers": [{"name": "app", "image": "example.com/app:1"}],
            "tolerations": [{"operator": "Exists"}],
        },
    }


async def create_bound_pods(
    client: KubeClient, namespace: str, bindings: list[tuple[str, str]], concurrency: int
) -> None:
    """Make `namespace` and in it a pod (`pod`) per (name, node), `concurrency` at a time."""
    await client.create("/api/v1/namespaces", {"metadata": {"name": namespace}})
    gate = asyncio.Semaphore(concurrency)

    async def create(name: str, node: str) -> None:
        async with gate:
            await client.create(f"/api/v1/namespaces/{namespace}/pods", pod(name, node))

    await asyncio.gather(*(create(name, node) for name, node in bindings))


async def apiserver_requests_by_code(client: KubeClient) -> Counter[tuple[str, str, str, str]]:
    """apiserver_request_total by (verb, resource, subresource, code)."""
    async with client.session.get(
        client.host + "/metrics", headers=await client._headers(None)
    ) as response:
        text = await response.text()
    counts: Counter[tuple[str, str, str, str]] = Counter()
    prefix = "apiserver_request_total{"
    for line in text.splitlines():
        if not line.startswith(prefix):
            continue
        labels_text, value = line[len(prefix) :].rsplit("} ", 1)
        labels = dict(
            part.split("=", 1) for part in labels_text.replace('"', "").split(",") if "=" in part
        )
        verb, resource, sub, code = (
            labels.get(k, "") for k in ("verb", "resource", "subresource", "code")
        )
        counts[verb, resource, sub, code] += int(float(value))
    return counts


def without_codes(counts: Counter[tuple[str, str, str, str]]) -> Counter[tuple[str, str, str]]:
    """Request counts by (verb, resource, subresource), summed over answer codes."""
    out: Counter[tuple[str, str, str]] = Counter()
    for (verb, resource, sub, _code), n in counts.items():
        out[verb, resource, sub] += n
    return out


async def apiserver_requests(client: KubeClient) -> Counter[tuple[str, str, str]]:
    """apiserver_request_total by (verb, resource, subresource), summed over codes."""
    return without_codes(await apiserver_requests_by_code(client))


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def peak_rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return 0.0


def parse_time(text: str) -> datetime:
    """An RFC 3339 time as the API server writes it (a Lease's renewTime)."""
    return datetime.fromisoformat(text.replace("Z", "+00:00"))


def node_is_ready(node: dict[str, Any]) -> bool:
    """Whether a Node's Ready condition is True."""
    return any(
        c.get("type") == "Ready" and c.get("status") == "True"
        for c in node.get("status", {}).get("conditions", [])
    )


async def ready_count(client: KubeClient, selector: str) -> int:
    """How many of the nodes `selector` picks are Ready."""
    nodes = await client.get("/api/v1/nodes", {"labelSelector": selector})
    return sum(1 for n in nodes.get("items", []) if node_is_ready(n))


async def until(
    what: str, probe: Callable[[], Awaitable[bool]], timeout: float, interval: float = 0.2
) -> float:
    """Wait until `probe()` holds, looking every `interval` s; the seconds it took.
    TimeoutError naming `what` after `timeout` s."""
    started = time.monotonic()
    while not await probe():
        if time.monotonic() - started > timeout:
            raise TimeoutError(what)
        await asyncio.sleep(interval)
    return time.monotonic() - started


async def wait_node_ready(client: KubeClient, node: str, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            obj = await client.get(f"/api/v1/nodes/{node}")
            if any(
                c["type"] == "Ready" and c["status"] == "True"
                for c in obj.get("status", {}).get("conditions", [])
            ):
                return
        except ApiError:
            pass
        await asyncio.sleep(0.2)
    raise TimeoutError("node never became Ready")


async def bench(
    kubeconfig: Path, count: int, concurrency: int, workdir: Path, profile: Path | None = None
) -> dict[str, object]:
    client = await KubeClient.connect(ClientOptions(kubeconfig=str(kubeconfig)))
    node = f"bench-{os.getpid()}"
    namespace = f"bench-{os.getpid()}"
    await client.create("/api/v1/namespaces", {"metadata": {"name": namespace}})
    agent_log = (workdir / "agent.log").open("wb")
    profiler = ["-m", "cProfile", "-o", str(profile)] if profile else []
    agent = await asyncio.create_subprocess_exec(
        sys.executable,
        *profiler,
        "-m",
        "vkpy",
        f"--kubeconfig={kubeconfig}",
        f"--node-name={node}",
        "--provider=sim",
        "--node-ip=127.0.0.1",
        "--listen-address=127.0.0.1",
        f"--port={free_port()}",
        f"--state-dir={workdir / 'state'}",
        "--log-level=warning",
        stdout=agent_log,
        stderr=agent_log,
    )
    try:
        await wait_node_ready(client, node)
        await asyncio.sleep(2)  # let start-up writes settle before counting
        running_at: dict[str, float] = {}
        created_at: dict[str, float] = {}
        watch_ready = asyncio.Event()

        async def watch() -> None:
            query = {"watch": True, "fieldSelector": f"spec.nodeName={node}"}
            watch_ready.set()
            async for line in client.stream_lines(
                f"/api/v1/namespaces/{namespace}/pods", query, timeout=3600
            ):
                event = json.loads(line)
                obj = event.get("object", {})
                name = obj.get("metadata", {}).get("name")
                if obj.get("status", {}).get("phase") == "Running" and name not in running_at:
                    running_at[name] = time.monotonic()
                    if len(running_at) == count:
                        return

        watcher = asyncio.create_task(watch())
        await watch_ready.wait()
        before = await apiserver_requests(client)
        cpu_before = cpu_seconds(agent.pid)
        semaphore = asyncio.Semaphore(concurrency)

        async def create(n: int) -> None:
            name = f"p{n:05d}"
            async with semaphore:
                created_at[name] = time.monotonic()
                await client.create(f"/api/v1/namespaces/{namespace}/pods", pod(name, node))

        started = time.monotonic()
        await asyncio.gather(*(create(n) for n in range(count)))
        created = time.monotonic()
        await asyncio.wait_for(watcher, timeout=600)
        finished = time.monotonic()
        await asyncio.sleep(3)  # trailing writes (events) that belong to these pods
        after = await apiserver_requests(client)
        rss = peak_rss_mib(agent.pid)
        agent_cpu = cpu_seconds(agent.pid) - cpu_before
    finally:
        agent.terminate()
        await asyncio.wait_for(agent.wait(), timeout=30)
        await client.request(
            "DELETE", f"/api/v1/namespaces/{namespace}", query={"gracePeriodSeconds": 0}
        )
        await client.request("DELETE", f"/api/v1/nodes/{node}")
        await client.close()
    delta = after - before
    agent_writes = sum(
        n
        for (verb, resource, sub), n in delta.items()
        if verb in WRITES and not (verb == "POST" and resource == "pods" and not sub)
    )
    status_patches = delta[("PATCH", "pods", "status")]
    events = delta[("POST", "events", "")] + delta[("PATCH", "events", "")]
    latencies = sorted(running_at[n] - created_at[n] for n in running_at)
    q = statistics.quantiles(latencies, n=100)
    return {
        "pods": count,
        "create_seconds": round(created - started, 2),
        "all_running_seconds": round(finished - started, 2),
        "pods_per_second": round(count / (finished - started), 1),
        "latency_p50_ms": round(q[49] * 1000),
        "latency_p90_ms": round(q[89] * 1000),
        "latency_p99_ms": round(q[98] * 1000),
        "agent_writes_per_pod": round(agent_writes / count, 2),
        "status_patches_per_pod": round(status_patches / count, 2),
        "event_writes_per_pod": round(events / count, 2),
        "agent_cpu_seconds": round(agent_cpu, 2),
        "agent_peak_rss_mib": round(rss, 1),
    }


def report(result: dict[str, object]) -> str:
    rows = "\n".join(f"| {k} | {v} |" for k, v in result.items())
    return (
        f"### Pod throughput ({datetime.now(UTC):%Y-%m-%d}, {platform.machine()}, "
        f"{os.cpu_count()} cores, Python {platform.python_version()})\n\n"
        "`python bench/pods.py --pods "
        f"{result['pods']}` (sim backend, zero latency, pods created with nodeName set)\n\n"
        "| measure | value |\n|---|---|\n" + rows + "\n"
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pods", type=int, default=1000)
    parser.add_argument("--concurrency", type=int, default=32)
    parser.add_argument("--kubeconfig", type=Path, help="existing cluster (default: start one)")
    published.add_options(parser)
    parser.add_argument(
        "--profile", type=Path, help="run the agent under cProfile, stats to this file"
    )
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="vkpy-bench-") as tmp:
        workdir = Path(tmp)
        with given_or_started(args.kubeconfig, workdir) as access:
            result = asyncio.run(
                bench(access.kubeconfig, args.pods, args.concurrency, workdir, args.profile)
            )
    text = report(result)
    print(text)
    if args.profile:
        stats = pstats.Stats(str(args.profile))
        stats.sort_stats("tottime").print_stats(30)
        stats.sort_stats("cumulative").print_stats(40)
    published.append(text, args)
    return 0


if __name__ == "__main__":
    sys.exit(main())
