"""What vkpy's own structures hold per node of a node set, line by line, in one process.

bench/nodes.py `--tracemalloc` profiles the real agent against the real control plane,
but tracing slows the agent so much that on a loaded machine it never reaches the
settled state it should measure (2026-12-05: 147 of 1000 nodes Ready, 170 of 10,000
pods Running when the snapshot was taken). This runs the same `NodeHost` (sim
backends, the kubelet API listener on loopback, one pod watch) in-process against
tests/unit/fake_kube.py, **a stand-in for the API server** that answers at once, so
no slow API server holds nodes or pods back (a very loaded machine still can: at load
average 30 the listener's certificate, made in a child process, timed out); then it takes a
tracemalloc snapshot and counts only allocations with a vkpy frame and no frame of the
stand-in in their stack (its copies of the objects and of what it was sent are not
vkpy's). What it leaves out: the API
connections' TLS buffers and requests in flight (there is no connection), the imports.

    python bench/host_memory.py --nodes 1000 --pods-per-node 10
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import sys
import tempfile
import time
import tracemalloc
from collections import Counter
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tests.unit.app.test_cli import settings  # noqa: E402
from tests.unit.fake_clock import FakeClock  # noqa: E402
from tests.unit.fake_kube import FakeKube  # noqa: E402
from tests.unit.fleet.test_host import flags, free_ports  # noqa: E402
from vkpy.fleet.host import NodeHost  # noqa: E402
from vkpy.fleet.membership import Static  # noqa: E402


def bound(name: str, node: str) -> dict[str, Any]:
    """A pod as bench/pods.py creates it, with what the API server adds to it."""
    return {
        "metadata": {"name": name, "namespace": "bench", "labels": {"app": "bench"}},
        "spec": {
            "nodeName": node,
            "restartPolicy": "Never",
            "containers": [
                {
                    "name": "app",
                    "image": "example.com/app:1",
                    "imagePullPolicy": "IfNotPresent",
                    "resources": {},
                    "terminationMessagePath": "/dev/termination-log",
                    "terminationMessagePolicy": "File",
                }
            ],
            "dnsPolicy": "ClusterFirst",
            "enableServiceLinks": False,
            "preemptionPolicy": "PreemptLowerPriority",
            "priority": 0,
            "schedulerName": "default-scheduler",
            "securityContext": {},
            "serviceAccount": "default",
            "serviceAccountName": "default",
            "terminationGracePeriodSeconds": 30,
            "tolerations": [{"operator": "Exists"}],
        },
    }


async def measure(args: argparse.Namespace, workdir: Path) -> str:
    port = free_ports(args.nodes)
    kube = FakeKube(FakeClock())
    s = settings(workdir, *flags(workdir, port, "--node-name=hm", f"--nodes={args.nodes}"))
    tracemalloc.start(args.frames)
    host = NodeHost(s, kube, Static())  # type: ignore[arg-type]
    for n in range(args.nodes * args.pods_per_node):
        kube.add_pod(bound(f"p{n:06d}", f"hm-{n % args.nodes}"))
    task = asyncio.create_task(host.run())
    count = args.nodes * args.pods_per_node
    started = time.monotonic()
    try:
        while True:
            await asyncio.sleep(2)
            running = sum(
                1
                for key, obj in kube.objects.items()
                if "/pods/" in key and (obj.get("status") or {}).get("phase") == "Running"
            )
            if running >= count and len(host.served) == args.nodes:
                break
            if time.monotonic() - started > args.timeout:
                raise TimeoutError(f"{running} of {count} pods Running")
        await asyncio.sleep(args.settle)
        gc.collect()
        snapshot = tracemalloc.take_snapshot()
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        await host.stop()
        tracemalloc.stop()
    by_line: Counter[str] = Counter()
    blocks: Counter[str] = Counter()
    for trace in snapshot.traces:
        if any("/tests/" in f.filename for f in trace.traceback):
            continue  # the stand-in's own: its copies of objects, what it was sent
        where = next(
            (
                f"{f.filename[f.filename.rindex('/vkpy/') + 1 :]}:{f.lineno}"
                for f in reversed(trace.traceback)
                if "/vkpy/" in f.filename
            ),
            None,
        )
        if where is None:
            continue
        by_line[where] += trace.size
        blocks[where] += 1
    total = sum(by_line.values())
    lines = [
        f"{args.nodes} nodes, {count} pods Running; vkpy-attributed {total / 2**20:.1f} MiB, "
        f"{total / 1024 / args.nodes:.1f} KiB per node",
        "",
        "| innermost vkpy line | KiB per node | blocks per node |",
        "|---|---|---|",
    ]
    for where, size in by_line.most_common(args.top):
        lines.append(
            f"| `{where}` | {size / 1024 / args.nodes:.2f} | {blocks[where] / args.nodes:.1f} |"
        )
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--nodes", type=int, default=1000)
    parser.add_argument("--pods-per-node", type=int, default=10)
    parser.add_argument("--frames", type=int, default=8, help="stack depth traced")
    parser.add_argument("--settle", type=float, default=5, help="wait once all run (s)")
    parser.add_argument("--timeout", type=float, default=900)
    parser.add_argument("--top", type=int, default=30, help="rows of the table")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="vkpy-host-memory-") as tmp:
        print(asyncio.run(measure(args, Path(tmp))))
    return 0


if __name__ == "__main__":
    sys.exit(main())
