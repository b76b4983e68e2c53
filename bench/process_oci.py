"""What `runtime: oci` costs next to `runtime: host`: create -> Ready and memory per pod.

For each mode a process-backend node is started against a real control plane (the
one --kubeconfig names, or a local one started here); `--pods` busybox pods that
sleep are created one after another and the time from `kubectl create` to the
Ready condition is taken for each (kubectl's start-up included). In `oci` mode the
image comes from Debian's docker-registry on loopback (tests/registry.py builds it
with umoci): the first pod pulls it (reported as the cold pod), the others find it
in the node's store (the cached figure). Memory per pod is the resident memory of
each pod's supervisor and every process below it (runc and the container in `oci`
mode), summed over the pods and divided by their number. Needs root.

    python bench/process_oci.py --pods 10
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

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tests.registry import Registry, busybox_layout  # noqa: E402
from vkpy.devcluster import ClusterAccess, given_or_started  # noqa: E402


def children() -> dict[int, list[int]]:
    tree: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        ppid = int(stat.rsplit(")", 1)[1].split()[1])
        tree.setdefault(ppid, []).append(int(entry.name))
    return tree


def rss_below(pid: int, tree: dict[int, list[int]]) -> int:
    total, todo = 0, [pid]
    while todo:
        current = todo.pop()
        todo.extend(tree.get(current, []))
        try:
            for line in Path(f"/proc/{current}/status").read_text().splitlines():
                if line.startswith("VmRSS:"):
                    total += int(line.split()[1]) * 1024
        except OSError:
            pass
    return total


class Node:
    def __init__(self, cluster: ClusterAccess, workdir: Path, mode: str, config: dict[str, object]):
        self.cluster = cluster
        self.name = f"vk-oci-{mode}-{os.getpid()}"
        state = workdir / self.name
        state.mkdir(mode=0o755)
        self.pods_dir = state / "pods"
        config = {**config, "pods_dir": str(self.pods_dir)}
        (state / "provider.yaml").write_text(yaml.safe_dump(config))
        log = (state / "agent.log").open("wb")
        argv = [
            *(sys.executable, "-m", "vkpy", f"--kubeconfig={cluster.kubeconfig}"),
            *(f"--node-name={self.name}", "--provider=process", f"--port={free_port()}"),
            f"--provider-config={state / 'provider.yaml'}",
            *("--listen-address=127.0.0.1", "--node-ip=127.0.0.1"),
            *(f"--state-dir={state / 'state'}", "--log-level=warning"),
        ]
        self.process = subprocess.Popen(argv, stdout=log, stderr=log, start_new_session=True)

    def kubectl(self, *args: str, stdin: bytes | None = None) -> str:
        return subprocess.run(
            self.cluster.kubectl_argv(*args),
            input=stdin,
            capture_output=True,
            timeout=300,
            check=True,
            env={**os.environ, **self.cluster.env()},
        ).stdout.decode()

    def create_ready(self, name: str, image: str) -> float:
        pod = {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": name, "namespace": "default"},
            "spec": {
                "nodeName": self.name,
                "restartPolicy": "Never",
                "terminationGracePeriodSeconds": 1,
                "containers": [
                    {
                        "name": "app",
                        "image": image,
                        "imagePullPolicy": "IfNotPresent",
                        "command": ["sleep", "36000"],
                    }
                ],
                "tolerations": [{"operator": "Exists"}],
            },
        }
        started = time.perf_counter()
        self.kubectl("create", "-f", "-", stdin=json.dumps(pod).encode())
        self.kubectl("wait", "--for=condition=Ready", f"pod/{name}", "--timeout=180s")
        return time.perf_counter() - started

    def memory_per_pod(self) -> float:
        tree = children()
        total, count = 0, 0
        for run in self.pods_dir.glob("*/containers/app/instances/0/run.json"):
            record = json.loads(run.read_text())
            total += rss_below(int(record["supervisor_pid"]), tree)
            count += 1
        return total / max(count, 1)

    def stop(self, pods: list[str]) -> None:
        if pods:
            self.kubectl("delete", "pod", *pods, "--wait=true", "--timeout=180s")
        self.process.terminate()
        self.process.wait(timeout=30)
        subprocess.run(
            self.cluster.kubectl_argv("delete", "node", self.name, "--wait=false"),
            capture_output=True,
            check=False,
        )


def measure(cluster: ClusterAccess, pods: int, registry: Registry) -> list[dict[str, object]]:
    image = f"{registry.host}/library/busybox:latest"
    modes: dict[str, dict[str, object]] = {
        "host": {},
        "oci": {"runtime": "oci", "registries": registry.serve_pause()},
    }
    rows: list[dict[str, object]] = []
    with tempfile.TemporaryDirectory(prefix="vkpy-bench-oci-") as tmp:
        workdir = Path(tmp)
        os.chmod(workdir, 0o755)
        for mode, config in modes.items():
            node = Node(cluster, workdir, mode, config)
            names = [f"oci-bench-{mode}-{i}" for i in range(pods)]
            created: list[str] = []
            try:
                ready = []
                for name in names:
                    ready.append(node.create_ready(name, image))
                    created.append(name)
                memory = node.memory_per_pod()
            finally:
                node.stop(created)
            cached = ready[1:] if mode == "oci" else ready
            rows.append(
                {
                    "runtime": mode,
                    "first pod s": round(ready[0], 2),
                    "create->Ready p50 s (cached image)": round(statistics.median(cached), 2),
                    "memory per pod MiB": round(memory / 2**20, 1),
                }
            )
            print(json.dumps(rows[-1]), flush=True)
    return rows


def report(rows: list[dict[str, object]], pods: int) -> str:
    header = list(rows[0])
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(str(row[h]) for h in header) + " |" for row in rows]
    load = os.getloadavg()[0]
    return (
        f"### runtime: oci vs host ({datetime.now(UTC):%Y-%m-%d}, {platform.machine()}, "
        f"{os.cpu_count()} cores, load {load:.1f})\n\n"
        f"`python bench/process_oci.py --pods {pods}` as root: busybox pods created one "
        "after another, `kubectl create` to Ready (kubectl start-up included); in `oci` "
        "the first pod pulls the image from a loopback registry.\n\n" + "\n".join(lines) + "\n"
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pods", type=int, default=10)
    parser.add_argument("--kubeconfig", type=Path, help="existing cluster (default: start one)")
    published.add_options(parser)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="vkpy-bench-") as tmp:
        registry = Registry(Path(tmp) / "registry").start()
        try:
            registry.push(busybox_layout(), "library/busybox:latest")
            kubeconfig = args.kubeconfig.absolute() if args.kubeconfig else None
            with given_or_started(kubeconfig, Path(tmp)) as cluster:
                rows = measure(cluster, args.pods, registry)
        finally:
            registry.stop()
    text = report(rows, args.pods)
    print(text)
    published.append(text, args)
    return 0


if __name__ == "__main__":
    sys.exit(main())
