"""What `runtime: oci` costs next to `runtime: host`: create -> Ready, memory and disk per pod.

Two process-backend nodes run at once against a real control plane (the one
--kubeconfig names, or a local one started here), one per runtime, and `--pods`
busybox pods that sleep are created on them *interleaved* (host, oci, host, oci,
...), one at a time, so both modes see the same load on a shared machine; the time
from `kubectl create` to the Ready condition is taken for each (kubectl's start-up
included) and the table gives p50, p99 and the oci/host ratio. In `oci` mode the
images come from Debian's docker-registry on loopback (tests/registry.py builds
them with umoci): the first oci pod pulls busybox and the pause image (the cold
pod), the others find them in the node's store. Then an nginx pod (Debian's nginx
in a minimal root, vkpy/devcluster/images) is created on the oci node: its cold pull
time is the `Pulled` Event's. Memory per pod is the resident memory of each pod's
supervisor and every process below it (the container; in `oci` mode also its
sandbox, the pause process), summed over the pods and divided by their number;
disk per pod is what the pod's directory holds on the node's filesystem (in `oci`
mode the container's own overlay layer; the image trees shared by all pods are
given apart). Needs root.

    python bench/process_oci.py --pods 10
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import platform
import re
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
from vkpy.devcluster.images.debian import nginx  # noqa: E402
from vkpy.providers.process import leftovers  # noqa: E402


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
        self.state = state
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

    def create_ready(
        self, name: str, image: str, command: tuple[str, ...] | None = ("sleep", "36000")
    ) -> float:
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
                        **({"command": list(command)} if command else {}),
                    }
                ],
                "tolerations": [{"operator": "Exists"}],
            },
        }
        started = time.perf_counter()
        self.kubectl("create", "-f", "-", stdin=json.dumps(pod).encode())
        self.kubectl("wait", "--for=condition=Ready", f"pod/{name}", "--timeout=180s")
        return time.perf_counter() - started

    def wait_ready(self) -> None:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            done = subprocess.run(
                self.cluster.kubectl_argv(
                    "wait", "--for=condition=Ready", f"node/{self.name}", "--timeout=60s"
                ),
                capture_output=True,
                check=False,
                env={**os.environ, **self.cluster.env()},
            )
            if done.returncode == 0:
                return
            time.sleep(0.5)  # not registered yet
        raise RuntimeError(f"node {self.name} did not become Ready")

    def memory_per_pod(self) -> float:
        tree = children()
        total, count = 0, 0
        for run in self.pods_dir.glob("*/containers/app/instances/0/run.json"):
            record = json.loads(run.read_text())
            total += rss_below(int(record["supervisor_pid"]), tree)
            count += 1
        return total / max(count, 1)

    def stop(self, pods: list[str]) -> None:
        try:
            if pods:
                self.kubectl("delete", "pod", *pods, "--wait=true", "--timeout=180s")
        finally:
            self.process.terminate()
            self.process.wait(timeout=30)
            # What a failed run left (containers, overlay roots) goes with the node.
            leftovers.end_pods(self.pods_dir)
            subprocess.run(
                self.cluster.kubectl_argv("delete", "node", self.name, "--wait=false"),
                capture_output=True,
                check=False,
            )


def rss_of(pid: int) -> int:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 0


def disk_bytes(path: Path) -> int:
    """Bytes of the files under `path` on its own filesystem (not into mounts)."""
    if not path.exists():
        return 0
    device = path.stat().st_dev
    total = 0
    for directory, dirs, files in os.walk(path):
        dirs[:] = [d for d in dirs if (Path(directory) / d).lstat().st_dev == device]
        for name in files:
            with contextlib.suppress(OSError):
                info = (Path(directory) / name).lstat()
                if info.st_dev == device:
                    total += info.st_blocks * 512
    return total


def percentile(values: list[float], fraction: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(fraction * (len(ordered) - 1)))]


def sandbox_pids(node: Node) -> list[int]:
    """The oci node's sandbox processes (pause), from runc's state."""
    root = node.state / "state" / "process" / "oci" / "runc"
    if not root.is_dir():
        return []
    out = subprocess.run(
        ["runc", "--root", str(root), "list", "--format", "json"], capture_output=True, check=True
    ).stdout
    ids = [item for item in json.loads(out or b"null") or [] if item["id"].count("-") == 5]
    return [int(item["pid"]) for item in ids if item["status"] == "running"]


def pulled_seconds(node: Node, name: str) -> float | None:
    """The pull time the `Pulled` Event of pod `name` reports."""
    events = json.loads(
        node.kubectl(
            "get", "events", "-n", "default", "-o", "json",
            "--field-selector", f"involvedObject.name={name},reason=Pulled",
        )
    )  # fmt: skip
    for event in events.get("items") or []:
        found = re.search(r"Successfully pulled image .* in ([0-9.]+)(ms|s) ", event["message"])
        if found:
            return float(found[1]) / (1000 if found[2] == "ms" else 1)
    return None


def measure(
    cluster: ClusterAccess, pods: int, registry: Registry
) -> tuple[list[dict[str, object]], dict[str, object]]:
    busybox = f"{registry.host}/library/busybox:latest"
    nginx = f"{registry.host}/library/nginx:latest"
    modes: dict[str, dict[str, object]] = {
        # Both on the host's network, so only the runtime differs (modes.py: as root
        # the default is oci on a network per pod).
        "host": {"runtime": "host", "network": "host"},
        "oci": {"runtime": "oci", "network": "host", "registries": registry.serve_pause()},
    }
    rows: list[dict[str, object]] = []
    with tempfile.TemporaryDirectory(prefix="vkpy-bench-oci-") as tmp:
        workdir = Path(tmp)
        os.chmod(workdir, 0o755)
        nodes = {mode: Node(cluster, workdir, mode, config) for mode, config in modes.items()}
        created: dict[str, list[str]] = {mode: [] for mode in modes}
        ready: dict[str, list[float]] = {mode: [] for mode in modes}
        try:
            for node in nodes.values():
                node.wait_ready()
            for i in range(pods):
                for mode, node in nodes.items():
                    name = f"oci-bench-{mode}-{i}"
                    ready[mode].append(node.create_ready(name, busybox))
                    created[mode].append(name)
            memory = {mode: node.memory_per_pod() for mode, node in nodes.items()}
            memory["oci"] += sum(rss_of(pid) for pid in sandbox_pids(nodes["oci"])) / pods
            disk = {
                mode: sum(disk_bytes(node.pods_dir / d.name) for d in node.pods_dir.iterdir())
                / pods
                for mode, node in nodes.items()
            }
            nginx_ready = nodes["oci"].create_ready("oci-bench-nginx", nginx, command=None)
            created["oci"].append("oci-bench-nginx")
            nginx_pull = pulled_seconds(nodes["oci"], "oci-bench-nginx")
            # The first goes first: both would listen on the host network's port 80.
            nodes["oci"].kubectl("delete", "pod", "oci-bench-nginx", "--wait=true")
            created["oci"].remove("oci-bench-nginx")
            nginx_again = nodes["oci"].create_ready("oci-bench-nginx-2", nginx, command=None)
            created["oci"].append("oci-bench-nginx-2")
            shared = disk_bytes(nodes["oci"].state / "state" / "process" / "oci" / "images")
        finally:
            for mode, node in nodes.items():
                node.stop(created[mode])
    host_p50 = statistics.median(ready["host"][1:])
    for mode in modes:
        cached = ready[mode][1:]
        rows.append(
            {
                "runtime": mode,
                "first pod s": round(ready[mode][0], 2),
                "create->Ready p50 s": round(statistics.median(cached), 2),
                "p99 s": round(percentile(cached, 0.99), 2),
                "p50 / host p50": round(statistics.median(cached) / host_p50, 2),
                "memory per pod MiB": round(memory[mode] / 2**20, 1),
                "pod dir disk per pod MiB": round(disk[mode] / 2**20, 2),
            }
        )
        print(json.dumps(rows[-1]), flush=True)
    extra: dict[str, object] = {
        "nginx_create_ready_s": round(nginx_ready, 2),
        "nginx_pull_s": nginx_pull,
        "nginx_second_pod_s": round(nginx_again, 2),
        "shared_image_trees_mib": round(shared / 2**20, 1),
    }
    print(json.dumps(extra), flush=True)
    return rows, extra


def report(rows: list[dict[str, object]], extra: dict[str, object], pods: int) -> str:
    header = list(rows[0])
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(str(row[h]) for h in header) + " |" for row in rows]
    load = os.getloadavg()[0]
    return (
        f"### runtime: oci vs host, interleaved ({datetime.now(UTC):%Y-%m-%d}, "
        f"{platform.machine()}, {os.cpu_count()} cores, load {load:.1f})\n\n"
        f"`python bench/process_oci.py --pods {pods}` as root: busybox pods created one "
        "at a time, alternating between a host node and an oci node running at once, "
        "`kubectl create` to Ready (kubectl start-up included); the oci node's first pod "
        "pulls busybox and pause from a loopback registry; p50/p99 leave out each node's "
        "first pod.\n\n" + "\n".join(lines) + "\n\n"
        f"nginx on the oci node, cold: create -> Ready {extra['nginx_create_ready_s']} s, "
        f"of which the pull (its `Pulled` Event) {extra['nginx_pull_s']} s; a second "
        f"nginx pod (image and its tree in place) {extra['nginx_second_pod_s']} s; the node's "
        f"unpacked image trees (busybox, pause, nginx), shared by all its pods: "
        f"{extra['shared_image_trees_mib']} MiB.\n"
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
            registry.push(nginx(), "library/nginx:latest")
            kubeconfig = args.kubeconfig.absolute() if args.kubeconfig else None
            with given_or_started(kubeconfig, Path(tmp)) as cluster:
                rows, extra = measure(cluster, args.pods, registry)
        finally:
            registry.stop()
    text = report(rows, extra, args.pods)
    print(text)
    published.append(text, args)
    return 0


if __name__ == "__main__":
    sys.exit(main())
