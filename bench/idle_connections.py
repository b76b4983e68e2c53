"""Idle and trickling connections against the kubelet API: what they cost vkpy, and
whether an authorized client is still answered meanwhile.

A bounded load test (issue 13, item 7). vkpy (sim backend) runs on 127.0.0.1 with
one running pod. The "attacker" connects from 127.0.0.2 (another loopback address,
so it is a different client from the API server, which reaches vkpy from
127.0.0.1), with plain blocking sockets, one after the other:

1. N idle connections (N = 1000, then 5000): TCP, the TLS handshake, then nothing.
   Reported: how many were established and how many refused; vkpy's RSS and open
   file descriptors with them open; how many vkpy had closed after `--hold`
   seconds; RSS and fds once the bench closed them all.
2. T trickling connections: after TLS, one byte of a request head every
   `--trickle-interval` seconds, for `--trickle-seconds`; how many vkpy closed and
   after how long.

Throughout, an authorized client is timed: `kubectl logs --tail=5` of the pod
(through the API server, which uses its kubelet client certificate) and GET /healthz
straight to vkpy with the admin's client certificate. Every step has a bound (each
connect 5 s, the whole open phase `--open-budget` s), so the bench ends.

    python bench/idle_connections.py                        # this tree's vkpy
    python bench/idle_connections.py --vkpy-src /tmp/old    # another tree's (PYTHONPATH)

Starts its own local control plane unless --kubeconfig is given. Nothing is sent to
any address but 127.0.0.1 and 127.0.0.2.
"""

from __future__ import annotations

import argparse
import base64
import contextlib
import json
import os
import platform
import resource
import socket
import ssl
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from datetime import UTC, datetime
from pathlib import Path

import yaml

from vkpy.devcluster import ClusterAccess, given_or_started

ROOT = Path(__file__).resolve().parents[1]
ATTACKER = "127.0.0.2"
HEAD = b"GET /healthz HTTP/1.1\r\nHost: vkpy\r\nUser-Agent: trickle\r\nX-Pad: " + b"x" * 400


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return round(int(line.split()[1]) / 1024, 1)
    return float("nan")


def fds(pid: int) -> int:
    return len(os.listdir(f"/proc/{pid}/fd"))


def insecure_context() -> ssl.SSLContext:
    ctx = ssl.create_default_context()
    ctx.check_hostname, ctx.verify_mode = False, ssl.CERT_NONE
    return ctx


class Authorized:
    """The client that must keep being answered."""

    def __init__(self, access: ClusterAccess, namespace: str, pod: str, port: int, work: Path):
        self.access, self.namespace, self.pod, self.port = access, namespace, pod, port
        user = yaml.safe_load(access.kubeconfig.read_text())["users"][0]["user"]
        cert, key = work / "admin.crt", work / "admin.key"
        cert.write_bytes(base64.b64decode(user["client-certificate-data"]))
        key.write_bytes(base64.b64decode(user["client-key-data"]))
        self.ctx = insecure_context()
        self.ctx.load_cert_chain(cert, key)

    def kubectl_logs(self) -> str:
        argv = self.access.kubectl_argv("logs", "-n", self.namespace, self.pod, "--tail=5")
        started = time.monotonic()
        try:
            subprocess.run(argv, capture_output=True, check=True, timeout=30)
        except (subprocess.CalledProcessError, subprocess.TimeoutExpired) as error:
            return f"failed ({type(error).__name__})"
        return f"{time.monotonic() - started:.2f} s"

    def healthz(self) -> str:
        url = f"https://127.0.0.1:{self.port}/healthz"
        started = time.monotonic()
        try:
            with urllib.request.urlopen(url, context=self.ctx, timeout=30) as answer:
                answer.read()
        except OSError as error:
            return f"failed ({type(error).__name__})"
        return f"{time.monotonic() - started:.3f} s"


def open_idle(port: int, count: int, budget: float) -> tuple[list[ssl.SSLSocket], int, float]:
    """Up to `count` TLS connections from ATTACKER; (open ones, refused, seconds)."""
    ctx = insecure_context()
    opened: list[ssl.SSLSocket] = []
    refused = 0
    started = time.monotonic()
    for _ in range(count):
        if time.monotonic() - started > budget:
            break
        raw = socket.socket()
        raw.settimeout(5)
        try:
            raw.bind((ATTACKER, 0))
            raw.connect(("127.0.0.1", port))
            opened.append(ctx.wrap_socket(raw))
        except (OSError, ssl.SSLError):
            raw.close()
            refused += 1
    return opened, refused, round(time.monotonic() - started, 1)


def still_open(sockets: list[ssl.SSLSocket]) -> int:
    alive = 0
    for sock in sockets:
        try:
            sock.setblocking(False)
            alive += sock.recv(1) != b""  # data would be odd; b"" is a close
        except ssl.SSLWantReadError:
            alive += 1
        except (OSError, ssl.SSLError):
            pass
    return alive


def close_all(sockets: list[ssl.SSLSocket]) -> None:
    for sock in sockets:
        with contextlib.suppress(OSError):
            sock.close()


def idle_phase(
    agent: subprocess.Popen[bytes],
    client: Authorized,
    port: int,
    count: int,
    args: argparse.Namespace,
) -> dict[str, object]:
    sockets, refused, took = open_idle(port, count, args.open_budget)
    row: dict[str, object] = {
        "established": len(sockets),
        "refused": refused,
        "open_seconds": took,
        "rss_MiB_open": rss_mib(agent.pid),
        "fds_open": fds(agent.pid),
        "kubectl_logs_during": client.kubectl_logs(),
        "healthz_during": client.healthz(),
    }
    time.sleep(max(0.0, args.hold - took))
    row["still_open_after_hold"] = still_open(sockets)
    row["rss_MiB_after_hold"] = rss_mib(agent.pid)
    row["fds_after_hold"] = fds(agent.pid)
    close_all(sockets)
    time.sleep(3)
    row["rss_MiB_after_close"] = rss_mib(agent.pid)
    row["fds_after_close"] = fds(agent.pid)
    return row


def trickle_phase(
    agent: subprocess.Popen[bytes], client: Authorized, port: int, args: argparse.Namespace
) -> dict[str, object]:
    sockets, refused, _ = open_idle(port, args.trickle, args.open_budget)
    started = time.monotonic()
    closed_at: dict[int, float] = {}
    sent = 0
    during = ""
    while time.monotonic() - started < args.trickle_seconds and len(closed_at) < len(sockets):
        for index, sock in enumerate(sockets):
            if index in closed_at:
                continue
            try:
                sock.setblocking(True)
                sock.settimeout(1)
                sock.send(HEAD[sent % len(HEAD) : sent % len(HEAD) + 1])
            except (OSError, ssl.SSLError):
                closed_at[index] = time.monotonic() - started
        sent += 1
        if not during and time.monotonic() - started > args.trickle_interval:
            during = client.kubectl_logs()
        time.sleep(args.trickle_interval)
    alive = still_open([s for i, s in enumerate(sockets) if i not in closed_at])
    close_all(sockets)
    times = sorted(closed_at.values())
    return {
        "trickling": len(sockets),
        "refused": refused,
        "bytes_sent_each": sent,
        "closed_by_vkpy": len(sockets) - alive,
        "median_seconds_to_close": round(statistics.median(times), 1) if times else "-",
        "still_open_at_end": alive,
        "kubectl_logs_during": during or client.kubectl_logs(),
        "rss_MiB": rss_mib(agent.pid),
    }


def sim_pod(node: str) -> dict[str, object]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "talker"},
        "spec": {
            "nodeName": node,
            "containers": [{"name": "app", "image": "example.com/app:1"}],
            "tolerations": [{"operator": "Exists"}],
        },
    }


def wait(what: str, probe: object, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if probe():  # type: ignore[operator]
            return
        time.sleep(1)
    raise SystemExit(f"timed out waiting for {what}")


def bench(access: ClusterAccess, args: argparse.Namespace, work: Path) -> dict[str, object]:
    node = namespace = f"bench-idle-{os.getpid()}"
    port = free_port()
    env = dict(os.environ)
    if args.vkpy_src:
        env["PYTHONPATH"] = str(args.vkpy_src)
    log = (work / "agent.log").open("wb")
    agent = subprocess.Popen(
        [
            sys.executable, "-m", "vkpy", f"--kubeconfig={access.kubeconfig}",
            f"--node-name={node}", "--provider=sim", "--node-ip=127.0.0.1",
            "--listen-address=127.0.0.1", f"--port={port}", f"--state-dir={work / 'state'}",
            "--log-level=warning", *args.vkpy_arg,
        ],
        stdout=log, stderr=log, env=env, cwd=work,  # not this tree's vkpy via `-m`'s ""
    )  # fmt: skip

    def kubectl(*argv: str, stdin: str | None = None) -> str:
        out = subprocess.run(
            access.kubectl_argv(*argv),
            input=stdin,
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        return out.stdout

    try:
        kubectl("create", "namespace", namespace)
        kubectl("apply", "-n", namespace, "-f", "-", stdin=json.dumps(sim_pod(node)))
        wait(
            "the pod to run",
            lambda: (
                kubectl("get", "pod", "-n", namespace, "talker", "-o=jsonpath={.status.phase}")
                == "Running"
            ),
            120,
        )
        client = Authorized(access, namespace, "talker", port, work)
        result: dict[str, object] = {
            "baseline": {
                "rss_MiB": rss_mib(agent.pid),
                "fds": fds(agent.pid),
                "kubectl_logs": client.kubectl_logs(),
                "healthz": client.healthz(),
            }
        }
        for count in args.idle:
            result[f"idle_{count}"] = idle_phase(agent, client, port, count, args)
        result["trickle"] = trickle_phase(agent, client, port, args)
        result["alive_at_end"] = agent.poll() is None
        return result
    finally:
        agent.terminate()
        with contextlib.suppress(subprocess.TimeoutExpired):
            agent.wait(timeout=30)
        kubectl("delete", "namespace", namespace, "--wait=false")
        kubectl("delete", "node", node, "--wait=false")


def report(result: dict[str, object], args: argparse.Namespace) -> str:
    load = os.getloadavg()
    lines = [
        f"### Idle connections{f' ({args.label})' if args.label else ''}",
        "",
        f"{datetime.now(UTC):%Y-%m-%d %H:%M} UTC, {platform.machine()}, {os.cpu_count()} cores, "
        f"Python {platform.python_version()}, load average {load[0]:.1f} at the end. "
        f"`python bench/idle_connections.py {' '.join(sys.argv[1:])}`",
        "",
        "```json",
        json.dumps(result, indent=1),
        "```",
    ]
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--idle", type=int, nargs="+", default=[1000, 5000])
    parser.add_argument("--hold", type=float, default=40.0, help="seconds idle connections stay")
    parser.add_argument("--open-budget", type=float, default=180.0)
    parser.add_argument("--trickle", type=int, default=200, help="trickling connections")
    parser.add_argument("--trickle-interval", type=float, default=3.0)
    parser.add_argument("--trickle-seconds", type=float, default=60.0)
    parser.add_argument("--vkpy-src", type=Path, help="run vkpy from this source tree")
    parser.add_argument(
        "--vkpy-arg", action="append", default=[], help="one more vkpy flag (repeatable)"
    )
    parser.add_argument("--label", default="")
    parser.add_argument("--kubeconfig", type=Path, help="existing cluster (default: start one)")
    args = parser.parse_args()
    _, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    with tempfile.TemporaryDirectory(prefix="vkpy-bench-idle-") as tmp:
        work = Path(tmp)
        with given_or_started(args.kubeconfig, work) as access:
            result = bench(access, args, work)
    print(report(result, args))
    return 0


if __name__ == "__main__":
    sys.exit(main())
