"""Exec benchmark: `kubectl exec` round-trip latency and stdin->stdout throughput.

Through the real API server, with the pinned kubectl, on both transports kubectl
offers: the default (kubectl speaks WebSocket to the API server, which translates to
SPDY towards the kubelet) and SPDY end to end (KUBECTL_REMOTE_COMMAND_WEBSOCKETS=false).

- Latency: wall time of `kubectl exec pod -- true`, `--runs` times in a row; p50/p99.
  kubectl's own start-up is included (as a user sees it); `kubectl get pod` is timed
  the same way for reference.
- Throughput: `kubectl exec -i pod -- cat` with `--mb` MiB of random bytes on stdin,
  all of it read back from stdout (each byte crosses kubectl -> API server -> vkpy ->
  the command and back); MiB/s = payload / wall time, median of `--repeat` runs, and
  the agent's CPU seconds per run. For comparison, the same bytes straight to vkpy's
  port over v5.channel.k8s.io (aiohttp client, the admin's client certificate): what
  vkpy alone sustains.

Backends: `sim` (the sim backend's built-in `true` and `cat`: the protocol path alone)
and `process` (real processes through the exec helper). Starts its own local control
plane unless --kubeconfig is given.

    python bench/exec.py --runs 200 --mb 64
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

from vkpy.devcluster import ClusterAccess, DevCluster, find_bin_dir

ROOT = Path(__file__).resolve().parents[1]
TRANSPORTS = ("websocket", "spdy")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


async def direct_cat(cluster: ClusterAccess, port: int, pod: str, payload: bytes) -> float:
    """MiB/s of `cat` straight to vkpy's port over v5.channel.k8s.io (no API server),
    with the kubeconfig's client certificate: vkpy's own ceiling."""
    user = yaml.safe_load(cluster.kubeconfig.read_text())["users"][0]["user"]
    context = ssl.create_default_context()
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE
    with tempfile.TemporaryDirectory() as tmp:
        cert, key = Path(tmp) / "cert", Path(tmp) / "key"
        cert.write_bytes(base64.b64decode(user["client-certificate-data"]))
        key.write_bytes(base64.b64decode(user["client-key-data"]))
        context.load_cert_chain(cert, key)
    url = f"https://127.0.0.1:{port}/exec/default/{pod}/app?command=cat&input=1&output=1"
    received = 0
    started = time.perf_counter()
    async with (
        aiohttp.ClientSession() as http,
        http.ws_connect(url, protocols=["v5.channel.k8s.io"], ssl=context) as ws,
    ):

        async def send() -> None:
            view = memoryview(payload)
            for start in range(0, len(view), 256 * 1024):
                await ws.send_bytes(b"\x00" + view[start : start + 256 * 1024])
            await ws.send_bytes(b"\xff\x00")

        sender = asyncio.create_task(send())
        async for message in ws:
            if message.data[:1] == b"\x01":
                received += len(message.data) - 1
        await sender
    if received != len(payload):
        raise RuntimeError(f"direct cat returned {received} of {len(payload)} bytes")
    return len(payload) / 2**20 / (time.perf_counter() - started)


class Bench:
    def __init__(self, cluster: ClusterAccess, workdir: Path) -> None:
        self.cluster = cluster
        self.workdir = workdir

    def env(self, transport: str) -> dict[str, str]:
        flag = "true" if transport == "websocket" else "false"
        return {**os.environ, **self.cluster.env(), "KUBECTL_REMOTE_COMMAND_WEBSOCKETS": flag}

    def kubectl(
        self, *args: str, transport: str = "websocket", stdin: bytes | None = None
    ) -> subprocess.CompletedProcess[bytes]:
        return subprocess.run(
            self.cluster.kubectl_argv(*args),
            input=stdin,
            capture_output=True,
            env=self.env(transport),
            timeout=300,
            check=True,
        )

    def start_agent(self, provider: str) -> tuple[subprocess.Popen[bytes], str, int]:
        node = f"vk-bench-{provider}-{os.getpid()}"
        port = free_port()
        state = self.workdir / node
        state.mkdir(mode=0o755)
        config = state / "provider.yaml"
        # The process backend's host programs, what this benchmark measures (as root
        # its default is images through runc: modes.py).
        config.write_text("{runtime: host, network: host}\n" if provider == "process" else "{}\n")
        log = (state / "agent.log").open("wb")
        argv = [
            sys.executable,
            "-m",
            "vkpy",
            f"--kubeconfig={self.cluster.kubeconfig}",
            f"--node-name={node}",
            f"--provider={provider}",
            f"--provider-config={config}",
            f"--port={port}",
            "--listen-address=127.0.0.1",
            "--node-ip=127.0.0.1",
            f"--state-dir={state / 'state'}",
            "--log-level=warning",
        ]
        agent = subprocess.Popen(argv, stdout=log, stderr=log, start_new_session=True)
        return agent, node, port

    def create_pod(self, node: str, provider: str) -> str:
        container: dict[str, object] = {"name": "app", "image": "x"}
        if provider == "process":
            container["command"] = ["sleep", "36000"]
        pod = {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": f"bench-{provider}", "namespace": "default"},
            "spec": {
                "nodeName": node,
                "restartPolicy": "Never",
                "terminationGracePeriodSeconds": 1,
                "containers": [container],
                "tolerations": [{"operator": "Exists"}],
            },
        }
        self.kubectl("apply", "-f", "-", stdin=json.dumps(pod).encode())
        name = str(pod["metadata"]["name"])  # type: ignore[index]
        self.kubectl("wait", "--for=condition=Ready", f"pod/{name}", "--timeout=120s")
        return name

    def latency(self, pod: str, transport: str, runs: int) -> list[float]:
        times = []
        for _ in range(runs):
            started = time.perf_counter()
            self.kubectl("exec", pod, "--", "true", transport=transport)
            times.append(time.perf_counter() - started)
        return times

    def baseline(self, pod: str, runs: int) -> list[float]:
        times = []
        for _ in range(runs):
            started = time.perf_counter()
            self.kubectl("get", "pod", pod, "-o", "name")
            times.append(time.perf_counter() - started)
        return times

    def throughput(
        self, pod: str, transport: str, payload: bytes, repeat: int, agent: int
    ) -> tuple[float, float]:
        """(median MiB/s, median agent CPU seconds per run)."""
        rates, cpu = [], []
        for _ in range(repeat):
            before = cpu_seconds(agent)
            started = time.perf_counter()
            got = self.kubectl("exec", "-i", pod, "--", "cat", transport=transport, stdin=payload)
            elapsed = time.perf_counter() - started
            cpu.append(cpu_seconds(agent) - before)
            if got.stdout != payload:
                raise RuntimeError(f"cat returned {len(got.stdout)} of {len(payload)} bytes")
            rates.append(len(payload) / 2**20 / elapsed)
        return statistics.median(rates), statistics.median(cpu)


def run(
    cluster: ClusterAccess, providers: list[str], runs: int, mb: int, repeat: int
) -> list[dict[str, object]]:
    rows: list[dict[str, object]] = []
    with tempfile.TemporaryDirectory(prefix="vkpy-bench-exec-") as tmp:
        workdir = Path(tmp)
        os.chmod(workdir, 0o755)  # process containers run as nobody
        bench = Bench(cluster, workdir)
        payload = os.urandom(mb * 2**20)
        for provider in providers:
            agent, node, port = bench.start_agent(provider)
            try:
                pod = bench.create_pod(node, provider)
                bench.latency(pod, "websocket", 3)  # warm caches (authz, connections)
                base = bench.baseline(pod, runs)
                for transport in TRANSPORTS:
                    times = bench.latency(pod, transport, runs)
                    rate, cpu = bench.throughput(pod, transport, payload, repeat, agent.pid)
                    direct = statistics.median(
                        asyncio.run(direct_cat(cluster, port, pod, payload)) for _ in range(repeat)
                    )
                    rows.append(
                        {
                            "backend": provider,
                            "transport": transport,
                            "exec p50 ms": round(1000 * percentile(times, 0.5), 1),
                            "exec p99 ms": round(1000 * percentile(times, 0.99), 1),
                            "get pod p50 ms": round(1000 * percentile(base, 0.5), 1),
                            "stdin->stdout MiB/s": round(rate, 1),
                            "direct v5 MiB/s": round(direct, 1),
                            "agent CPU s per run": round(cpu, 2),
                        }
                    )
                    print(json.dumps(rows[-1]), flush=True)
                bench.kubectl("delete", "pod", pod, "--wait=true", "--timeout=60s")
            finally:
                agent.terminate()
                agent.wait(timeout=30)
                subprocess.run(
                    cluster.kubectl_argv("delete", "node", node, "--wait=false"),
                    capture_output=True,
                    check=False,
                )
    return rows


def report(rows: list[dict[str, object]], runs: int, mb: int, repeat: int) -> str:
    header = list(rows[0])
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(str(row[h]) for h in header) + " |" for row in rows]
    return (
        f"### Exec latency and throughput ({datetime.now(UTC):%Y-%m-%d}, {platform.machine()}, "
        f"{os.cpu_count()} cores, Python {platform.python_version()})\n\n"
        f"`python bench/exec.py --runs {runs} --mb {mb} --repeat {repeat}`: "
        "`kubectl exec pod -- true` wall time (kubectl start-up included; "
        "`kubectl get pod` for reference) and `kubectl exec -i pod -- cat` with "
        f"{mb} MiB of random stdin read back from stdout (median of {repeat}), through the "
        "API server of the local control plane. websocket: kubectl's default "
        "(WebSocket to the API server, SPDY to vkpy); spdy: SPDY end to end. "
        "direct v5: the same bytes sent straight to vkpy's port over v5.channel.k8s.io "
        "(no API server, no kubectl), vkpy's own ceiling.\n\n" + "\n".join(lines) + "\n"
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=200, help="exec round trips per transport")
    parser.add_argument("--mb", type=int, default=64, help="MiB sent through cat")
    parser.add_argument("--repeat", type=int, default=3, help="throughput runs (median)")
    parser.add_argument("--providers", default="sim,process")
    parser.add_argument("--kubeconfig", type=Path, help="existing cluster (default: start one)")
    published.add_options(parser)
    args = parser.parse_args()
    providers = [p for p in args.providers.split(",") if p]
    with tempfile.TemporaryDirectory(prefix="vkpy-bench-") as tmp:
        dev = None
        if args.kubeconfig is None:
            dev = DevCluster(Path(tmp) / "cluster")
            dev.up()
            cluster = dev.access()
        else:
            cluster = ClusterAccess(args.kubeconfig.absolute(), find_bin_dir() / "kubectl")
        try:
            rows = run(cluster, providers, args.runs, args.mb, args.repeat)
        finally:
            if dev is not None:
                dev.down()
    text = report(rows, args.runs, args.mb, args.repeat)
    print(text)
    published.append(text, args)
    return 0


if __name__ == "__main__":
    sys.exit(main())
