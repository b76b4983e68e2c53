"""What the process backend's sandbox costs: create -> Running and exec latency, with
the sandbox (the default when vkpy is root: per-pod users, UTS, IPC, mount and PID
namespaces per pod), without the pod filesystem (`pod_filesystem: false`: no mount
and PID namespaces) and without any (`run_as: nobody`, one user for every pod,
`pod_namespaces: false`).

For each mode a process-backend node is started against a real control plane (the
one --kubeconfig names, or a local one started here); `--pods` pods are created one
after another and the time from `kubectl create` to the pod's Ready condition is
taken for each (kubectl's start-up included, as a user sees it); then `kubectl exec
pod -- true` is timed `--runs` times. Figures are medians and p90s.

    python bench/process_sandbox.py --pods 10 --runs 30
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path

import published
import yaml
from pods import free_port

from vkpy.devcluster import ClusterAccess, given_or_started

ROOT = Path(__file__).resolve().parents[1]
MODES: dict[str, dict[str, object]] = {
    "sandbox: per-pod users, UTS+IPC+mount+PID namespaces (pod filesystem)": {},
    "per-pod users, UTS+IPC namespaces, no pod filesystem": {"pod_filesystem": False},
    "no sandbox: run_as nobody, no namespaces": {"run_as": "nobody", "pod_namespaces": False},
}


def p90(values: list[float]) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(0.9 * len(ordered)))]


class Node:
    """A process-backend vkpy node in its own state directory."""

    def __init__(
        self, cluster: ClusterAccess, workdir: Path, mode: str, config: dict[str, object]
    ) -> None:
        self.cluster = cluster
        self.name = f"vk-sandbox-{len(config)}-{os.getpid()}"
        state = workdir / self.name
        state.mkdir(mode=0o755)
        # Host programs: the sandbox measured here is host mode's (modes.py: as root
        # the default is runtime: oci).
        settings = {"runtime": "host", "network": "host", **(config or {})}
        (state / "provider.yaml").write_text(yaml.safe_dump(settings))
        log = (state / "agent.log").open("wb")
        argv = [
            *(sys.executable, "-m", "vkpy", f"--kubeconfig={cluster.kubeconfig}"),
            *(f"--node-name={self.name}", "--provider=process", f"--port={free_port()}"),
            f"--provider-config={state / 'provider.yaml'}",
            *("--listen-address=127.0.0.1", "--node-ip=127.0.0.1"),
            *(f"--state-dir={state / 'state'}", "--log-level=warning"),
        ]
        self.mode = mode
        self.process = subprocess.Popen(argv, stdout=log, stderr=log, start_new_session=True)

    def kubectl(self, *args: str, stdin: bytes | None = None) -> None:
        subprocess.run(
            self.cluster.kubectl_argv(*args),
            input=stdin,
            capture_output=True,
            timeout=300,
            check=True,
            env={**os.environ, **self.cluster.env()},
        )

    def create_ready(self, name: str) -> float:
        pod = {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": name, "namespace": "default"},
            "spec": {
                "nodeName": self.name,
                "restartPolicy": "Never",
                "terminationGracePeriodSeconds": 1,
                "containers": [{"name": "app", "image": "x", "command": ["sleep", "36000"]}],
                "tolerations": [{"operator": "Exists"}],
            },
        }
        started = time.perf_counter()
        self.kubectl("create", "-f", "-", stdin=json.dumps(pod).encode())
        self.kubectl("wait", "--for=condition=Ready", f"pod/{name}", "--timeout=120s")
        return time.perf_counter() - started

    def exec_true(self, name: str) -> float:
        started = time.perf_counter()
        self.kubectl("exec", name, "--", "true")
        return time.perf_counter() - started

    def stop(self, pods: list[str]) -> None:
        if pods:
            self.kubectl("delete", "pod", *pods, "--wait=true", "--timeout=120s")
        self.process.terminate()
        self.process.wait(timeout=30)
        subprocess.run(
            self.cluster.kubectl_argv("delete", "node", self.name, "--wait=false"),
            capture_output=True,
            check=False,
        )


def measure(cluster: ClusterAccess, pods: int, runs: int) -> list[dict[str, object]]:
    rows: list[dict[str, object]] = []
    with tempfile.TemporaryDirectory(prefix="vkpy-bench-sandbox-") as tmp:
        workdir = Path(tmp)
        os.chmod(workdir, 0o755)  # containers run as other users and must traverse it
        for mode, config in MODES.items():
            node = Node(cluster, workdir, mode, config)
            names = [f"sandbox-{len(config)}-{i}" for i in range(pods)]
            created: list[str] = []
            try:
                ready = []
                for name in names:
                    ready.append(node.create_ready(name))
                    created.append(name)
                node.exec_true(names[0])  # warm caches (authz, connections)
                execs = [node.exec_true(names[i % pods]) for i in range(runs)]
            finally:
                node.stop(created)
            rows.append(
                {
                    "mode": mode,
                    "create->Ready p50 s": round(statistics.median(ready), 2),
                    "create->Ready p90 s": round(p90(ready), 2),
                    "exec p50 ms": round(1000 * statistics.median(execs)),
                    "exec p90 ms": round(1000 * p90(execs)),
                }
            )
            print(json.dumps(rows[-1]), flush=True)
    return rows


def report(rows: list[dict[str, object]], pods: int, runs: int) -> str:
    header = list(rows[0])
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(str(row[h]) for h in header) + " |" for row in rows]
    load = os.getloadavg()[0]
    return (
        f"### Process backend sandbox cost ({datetime.now(UTC):%Y-%m-%d}, "
        f"{platform.machine()}, {os.cpu_count()} cores, load {load:.1f}, "
        f"Python {platform.python_version()})\n\n"
        f"`python bench/process_sandbox.py --pods {pods} --runs {runs}` as root: {pods} "
        "pods created one after another, `kubectl create` to the Ready condition (kubectl "
        f"start-up included), then `kubectl exec pod -- true` {runs} times, with the "
        "sandbox (the default as root) and without.\n\n" + "\n".join(lines) + "\n"
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pods", type=int, default=10, help="pods created per mode")
    parser.add_argument("--runs", type=int, default=30, help="exec round trips per mode")
    parser.add_argument("--kubeconfig", type=Path, help="existing cluster (default: start one)")
    published.add_options(parser)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="vkpy-bench-") as tmp:
        kubeconfig = args.kubeconfig.absolute() if args.kubeconfig else None
        with given_or_started(kubeconfig, Path(tmp)) as cluster:
            rows = measure(cluster, args.pods, args.runs)
    text = report(rows, args.pods, args.runs)
    print(text)
    published.append(text, args)
    return 0


if __name__ == "__main__":
    sys.exit(main())
