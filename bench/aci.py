"""ACI backend benchmark: ARM calls per pod per minute, create -> Running, delete -> gone.

Against our ACI emulator (tests/aci_emulator, in this process) and the real control
plane (a dev cluster, unless --kubeconfig is given), `python -m vkpy --provider aci`
runs as a process with the production polling settings (poll_interval 5 s,
refresh_interval 30 s unless overridden). `--pods` pods (the seed's shape) are
created at once; the bench reports:

- create -> Running: from `kubectl create` to the pod's Running phase as the API
  server shows it (p50, p90, max over the pods);
- steady state: every ARM call the emulator served during `--steady` seconds with
  all pods Running, per minute in total and per pod, by route;
- delete -> gone: from `kubectl delete --wait=false` of all pods to the last pod
  object gone (the pods' group deleted by then).

    python bench/aci.py --pods 20 --steady 120
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import secrets
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections import Counter
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tests.aci_emulator import AciEmulator  # noqa: E402
from vkpy.devcluster import ClusterAccess, given_or_started  # noqa: E402


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def pod(name: str, node: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "labels": {"bench": "aci"}},
        "spec": {
            "automountServiceAccountToken": False,
            "nodeSelector": {"type": "virtual-kubelet", "kubernetes.io/hostname": node},
            "tolerations": [{"key": "virtual-kubelet.io/provider", "operator": "Exists"}],
            "containers": [
                {
                    "name": "hello",
                    "image": "mcr.microsoft.com/azuredocs/aci-helloworld",
                    "ports": [{"containerPort": 80}],
                    "resources": {"requests": {"cpu": "100m", "memory": "128M"}},
                }
            ],
        },
    }


def phases(access: ClusterAccess, namespace: str) -> dict[str, str]:
    out = access.run_kubectl("get", "pods", "-n", namespace, "-o", "json").stdout
    return {p["metadata"]["name"]: p["status"].get("phase", "") for p in json.loads(out)["items"]}


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pods", type=int, default=20)
    parser.add_argument("--steady", type=float, default=120.0, help="seconds at steady state")
    parser.add_argument("--poll-interval", type=float, default=5.0)
    parser.add_argument("--refresh-interval", type=float, default=30.0)
    parser.add_argument("--kubeconfig", type=Path)
    args = parser.parse_args()

    emulator = AciEmulator().start()
    work = Path(tempfile.mkdtemp(prefix="vkpy-bench-aci-"))
    node = f"aci-bench-{secrets.token_hex(2)}"
    config = {
        "subscription_id": emulator.store.subscription,
        "resource_group": "vkpy-rg",
        "region": "westeurope",
        "arm_endpoint": emulator.url,
        "ca_bundle": str(emulator.ca_path),
        "credentials": {
            "type": "client_secret",
            "tenant_id": emulator.directory.tenant,
            "client_id": emulator.directory.client_id,
            "client_secret": emulator.directory.client_secret,
            "authority": emulator.url,
        },
        "poll_interval": args.poll_interval,
        "refresh_interval": args.refresh_interval,
    }
    (work / "aci.yaml").write_text(yaml.safe_dump(config))
    try:
        with given_or_started(args.kubeconfig, work) as access:
            namespace = f"bench-aci-{secrets.token_hex(2)}"
            access.run_kubectl("create", "namespace", namespace)
            log = (work / "vkpy.log").open("wb")
            agent = subprocess.Popen(
                [
                    sys.executable, "-m", "vkpy", f"--kubeconfig={access.kubeconfig}",
                    f"--node-name={node}", "--provider=aci", f"--provider-config={work}/aci.yaml",
                    f"--port={free_port()}", "--listen-address=127.0.0.1", "--node-ip=127.0.0.1",
                    f"--state-dir={work}/state",
                ],
                stdout=log, stderr=log, cwd=ROOT,
                env={**os.environ, "PYTHONPATH": str(ROOT)},
            )  # fmt: skip
            try:
                run(access, emulator, namespace, node, args)
            finally:
                agent.terminate()
                agent.wait(30)
                access.run_kubectl("delete", "namespace", namespace, "--wait=false", check=False)
                access.run_kubectl("delete", "node", node, "--wait=false", check=False)
    finally:
        emulator.stop()


def run(access: ClusterAccess, emulator: AciEmulator, namespace: str, node: str, args: Any) -> None:
    deadline = time.monotonic() + 120
    while node not in access.run_kubectl("get", "nodes", "-o", "name").stdout:
        if time.monotonic() > deadline:
            raise SystemExit("the node did not register")
        time.sleep(0.5)
    created: dict[str, float] = {}
    for i in range(args.pods):
        name = f"p{i}"
        access.run_kubectl("create", "-n", namespace, "-f", "-", input=json.dumps(pod(name, node)))
        created[name] = time.monotonic()
    running: dict[str, float] = {}
    deadline = time.monotonic() + 300
    while len(running) < args.pods:
        if time.monotonic() > deadline:
            raise SystemExit(f"only {len(running)} of {args.pods} pods Running")
        now = time.monotonic()
        for name, phase in phases(access, namespace).items():
            if phase == "Running" and name not in running:
                running[name] = now - created[name]
        time.sleep(0.2)
    before = Counter(emulator.store.calls)
    time.sleep(args.steady)
    during = Counter(emulator.store.calls)
    during.subtract(before)
    started = time.monotonic()
    access.run_kubectl("delete", "pods", "--all", "-n", namespace, "--wait=false")
    while phases(access, namespace):
        time.sleep(0.2)
    deleted = time.monotonic() - started
    left = [g for g in emulator.store.groups.values() if g.resource_group == "vkpy-rg"]

    minutes = args.steady / 60
    total = sum(v for v in during.values() if v > 0)
    times = list(running.values())
    print(
        f"ACI bench {datetime.now(UTC):%Y-%m-%d %H:%M} UTC, {platform.machine()}, "
        f"{os.cpu_count()} cores, Python {platform.python_version()}, load "
        f"{os.getloadavg()[0]:.1f}; pods {args.pods}, poll {args.poll_interval} s, "
        f"refresh {args.refresh_interval} s, steady {args.steady:.0f} s"
    )
    print(
        f"create -> Running: p50 {statistics.median(times):.2f} s, "
        f"p90 {percentile(times, 0.9):.2f} s, max {max(times):.2f} s"
    )
    print(f"delete -> all {args.pods} pods gone: {deleted:.2f} s (groups left: {len(left)})")
    print(
        f"steady state: {total / minutes:.1f} ARM calls/min, "
        f"{total / minutes / args.pods:.2f} per pod per minute"
    )
    for route, count in sorted(during.items(), key=lambda kv: -kv[1]):
        if count > 0:
            print(f"  {count / minutes:7.1f}/min  {route}")


if __name__ == "__main__":
    main()
