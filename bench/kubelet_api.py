"""Kubelet API benchmark: `kubectl logs` throughput for a big log, and the latency
of /stats/summary and /metrics/resource with many pods.

- Logs: one pod with a big log of 200-byte lines: with `--provider sim` a sim pod
  whose log is a function of time (all lines appear after a second), with
  `--provider process` a real process that writes them (`yes | head`) into the
  process backend's log files. Read with `kubectl logs` through the API server and,
  for comparison, straight from vkpy's port with curl and the admin's client
  certificate. MiB/s = bytes / wall time of the whole command (kubectl's or curl's
  start included), median of `--repeat` runs.
- Stats: P pods created with nodeName set; once all run, sequential requests to
  /stats/summary and /metrics/resource straight to vkpy on 127.0.0.1 with the
  admin's client certificate. Reports p50/p90/p99 and the response size. Not
  through the API server's node proxy: it does not proxy to loopback node
  addresses, and benchmarks may only send traffic to loopback.

vkpy runs with --node-ip and --listen-address 127.0.0.1; nothing is sent to any
other address of this host.

Starts its own local control plane unless --kubeconfig is given.

    python bench/kubelet_api.py --log-mb 200 --pods 1000
    python bench/kubelet_api.py --provider process --log-mb 200 --pods 0
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import json
import os
import platform
import socket
import ssl
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path

import aiohttp
import published
import yaml

from vkpy.devcluster import ClusterAccess, given_or_started
from vkpy.kube.client import ApiError, ClientOptions, KubeClient

ROOT = Path(__file__).resolve().parents[1]
LINE_BYTES = 200


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def pod(
    name: str,
    node: str,
    annotations: dict[str, str] | None = None,
    command: list[str] | None = None,
) -> dict[str, object]:
    container: dict[str, object] = {"name": "app", "image": "example.com/app:1"}
    if command:
        container["command"] = command
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "annotations": annotations or {}},
        "spec": {
            "nodeName": node,
            "restartPolicy": "Never",
            "containers": [container],
            "tolerations": [{"operator": "Exists"}],
        },
    }


async def big_log(
    client: KubeClient,
    session: aiohttp.ClientSession,
    ctx: ssl.SSLContext,
    url: str,
    path: str,
    node: str,
    provider: str,
    lines: int,
) -> None:
    """Create the pod with a `lines`-line log and wait until all of it is written."""
    if provider == "sim":  # the log is a function of time: all lines after 1 s
        annotations = {
            "sim.vkpy.io/log-lines-per-second": str(lines),
            "sim.vkpy.io/log-line-bytes": str(LINE_BYTES),
        }
        await client.create(path, pod("big-log", node, annotations))
        await wait_running(client, path.split("/")[4], 1, 120)
        await asyncio.sleep(1.5)
        return
    # `$$` is a literal `$` after Kubernetes' $(VAR) expansion.
    script = f'yes "$$(printf %0{LINE_BYTES - 1}d 0)" | head -n {lines - 1}; echo done; sleep 3600'
    await client.create(path, pod("big-log", node, command=["sh", "-c", script]))
    await wait_running(client, path.split("/")[4], 1, 120)
    deadline = time.monotonic() + 600
    while time.monotonic() < deadline:
        async with session.get(url + "?tailLines=1", ssl=ctx) as response:
            if await response.read() == b"done\n":
                return
        await asyncio.sleep(0.5)
    raise TimeoutError("the big log was never complete")


def admin_context(kubeconfig: Path, workdir: Path) -> ssl.SSLContext:
    user = yaml.safe_load(kubeconfig.read_text())["users"][0]["user"]
    cert, key = workdir / "admin.crt", workdir / "admin.key"
    cert.write_bytes(base64.b64decode(user["client-certificate-data"]))
    key.write_bytes(base64.b64decode(user["client-key-data"]))
    ctx = ssl.create_default_context()
    ctx.check_hostname, ctx.verify_mode = False, ssl.CERT_NONE
    ctx.load_cert_chain(cert, key)
    return ctx


async def wait_running(client: KubeClient, namespace: str, count: int, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        pods = await client.get(f"/api/v1/namespaces/{namespace}/pods")
        running = sum(1 for p in pods["items"] if p.get("status", {}).get("phase") == "Running")
        if running >= count:
            return
        await asyncio.sleep(0.5)
    raise TimeoutError(f"{count} pods never ran")


def spread(values: list[float]) -> str:
    return f"{statistics.median(values):.1f} ({min(values):.1f}-{max(values):.1f})"


def quantiles_ms(samples: list[float]) -> dict[str, float]:
    q = statistics.quantiles(samples, n=100)
    return {
        "p50_ms": round(q[49] * 1000, 1),
        "p90_ms": round(q[89] * 1000, 1),
        "p99_ms": round(q[98] * 1000, 1),
    }


async def timed_gets(
    session: aiohttp.ClientSession, url: str, count: int, **kwargs: object
) -> tuple[dict[str, float], int]:
    times: list[float] = []
    size = 0
    for _ in range(count):
        started = time.perf_counter()
        async with session.get(url, **kwargs) as response:  # type: ignore[arg-type]
            body = await response.read()
            assert response.status == 200, (response.status, body[:200])
        times.append(time.perf_counter() - started)
        size = len(body)
    return quantiles_ms(times), size


async def bench(
    access: ClusterAccess,
    provider: str,
    log_mb: int,
    pods: int,
    requests: int,
    repeat: int,
    workdir: Path,
) -> dict[str, object]:
    kubeconfig = access.kubeconfig
    client = await KubeClient.connect(ClientOptions(kubeconfig=str(kubeconfig)))
    node, namespace = f"bench-api-{os.getpid()}", f"bench-api-{os.getpid()}"
    address = "127.0.0.1"  # loopback only (see the module docstring)
    port = free_port()
    await client.create("/api/v1/namespaces", {"metadata": {"name": namespace}})
    log = (workdir / "agent.log").open("wb")
    settings = workdir / "provider.yaml"
    # The process backend's host programs, as measured so far (as root its default is
    # images through runc: modes.py); the sim backend takes its defaults.
    settings.write_text("{runtime: host, network: host}\n" if provider == "process" else "{}\n")
    agent = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "vkpy", f"--kubeconfig={kubeconfig}", f"--node-name={node}",
        f"--provider={provider}", f"--node-ip={address}", f"--listen-address={address}",
        f"--port={port}", f"--state-dir={workdir / 'state'}", "--log-level=warning",
        f"--provider-config={settings}",
        stdout=log,
        stderr=log,
    )  # fmt: skip
    ctx = admin_context(kubeconfig, workdir)
    result: dict[str, object] = {}
    try:
        # --- logs ------------------------------------------------------------------
        lines = log_mb * 2**20 // LINE_BYTES
        path = f"/api/v1/namespaces/{namespace}/pods"
        logs_url = f"https://{address}:{port}/containerLogs/{namespace}/big-log/app"
        async with aiohttp.ClientSession() as session:
            await big_log(client, session, ctx, logs_url, path, node, provider, lines)
        kubectl = access.kubectl_argv("logs", "-n", namespace, "big-log", f"--tail={lines}")
        direct_url = f"{logs_url}?tailLines={lines}"
        curl = [
            "curl", "-sk", "--cert", str(workdir / "admin.crt"),
            "--key", str(workdir / "admin.key"),
            "-o", "/dev/null", "-w", "%{size_download}", direct_url,
        ]  # fmt: skip
        through_api: list[float] = []
        direct: list[float] = []
        cpu: list[float] = []
        size = 0
        for _ in range(repeat):
            cpu_before = cpu_seconds(agent.pid)
            started = time.perf_counter()
            out = await asyncio.to_thread(subprocess.run, kubectl, capture_output=True, check=True)
            size = len(out.stdout) / 2**20
            through_api.append(size / (time.perf_counter() - started))
            cpu.append(cpu_seconds(agent.pid) - cpu_before)
            started = time.perf_counter()
            fetched = await asyncio.to_thread(
                subprocess.run, curl, capture_output=True, check=True, text=True
            )
            direct.append(int(fetched.stdout) / 2**20 / (time.perf_counter() - started))
        result.update(
            {
                "log_MiB": round(size, 1),
                "log_lines": lines,
                "kubectl_logs_MiB_per_s (median, min-max)": spread(through_api),
                "vkpy_cpu_seconds_per_kubectl_logs (median)": round(statistics.median(cpu), 2),
                "direct_logs_MiB_per_s (median, min-max)": spread(direct),
            }
        )
        await client.request("DELETE", f"{path}/big-log", query={"gracePeriodSeconds": 0})

        # --- stats with many pods ----------------------------------------------------
        semaphore = asyncio.Semaphore(32)

        async def create(n: int) -> None:
            async with semaphore:
                await client.create(path, pod(f"p{n:05d}", node))

        if not pods:
            return result
        await asyncio.gather(*(create(n) for n in range(pods)))
        await wait_running(client, namespace, pods, 600)
        async with aiohttp.ClientSession() as session:
            base = f"https://{address}:{port}"
            summary, summary_size = await timed_gets(
                session, base + "/stats/summary", requests, ssl=ctx
            )
            resource, resource_size = await timed_gets(
                session, base + "/metrics/resource", requests, ssl=ctx
            )
            result["pods"] = pods
            result["stats_summary_direct"] = summary
            result["stats_summary_bytes"] = summary_size
            result["metrics_resource_direct"] = resource
            result["metrics_resource_bytes"] = resource_size
    finally:
        agent.terminate()
        await asyncio.wait_for(agent.wait(), timeout=30)
        try:
            await client.request(
                "DELETE", f"/api/v1/namespaces/{namespace}", query={"gracePeriodSeconds": 0}
            )
            await client.request("DELETE", f"/api/v1/nodes/{node}")
        except ApiError:
            pass
        await client.close()
    return result


def report(result: dict[str, object], args: argparse.Namespace) -> str:
    rows = "\n".join(f"| {k} | {v} |" for k, v in result.items())
    return (
        f"### Kubelet API, {args.provider} backend ({datetime.now(UTC):%Y-%m-%d}, "
        f"{platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()})\n\n"
        f"`python bench/kubelet_api.py --provider {args.provider} --log-mb {args.log_mb} "
        f"--pods {args.pods} --requests {args.requests}` ({args.provider} backend; logs: "
        f"{LINE_BYTES}-byte lines, "
        "whole-command wall time incl. kubectl/curl start; stats: sequential requests once "
        f"every pod runs).{' ' + args.note if args.note else ''}\n\n"
        "| measure | value |\n|---|---|\n" + rows + "\n"
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--provider", choices=["sim", "process"], default="sim")
    parser.add_argument("--log-mb", type=int, default=200)
    parser.add_argument("--pods", type=int, default=1000)
    parser.add_argument("--requests", type=int, default=50)
    parser.add_argument("--repeat", type=int, default=3, help="log transfers of each kind")
    parser.add_argument("--note", default="", help="a sentence added to the report")
    parser.add_argument("--kubeconfig", type=Path, help="existing cluster (default: start one)")
    published.add_options(parser)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="vkpy-bench-") as tmp:
        workdir = Path(tmp)
        with given_or_started(args.kubeconfig, workdir) as access:
            result = asyncio.run(
                bench(
                    access,
                    args.provider,
                    args.log_mb,
                    args.pods,
                    args.requests,
                    args.repeat,
                    workdir,
                )
            )
    text = report(result, args)
    print(text)
    print(json.dumps(result))
    published.append(text, args)
    return 0


if __name__ == "__main__":
    sys.exit(main())
