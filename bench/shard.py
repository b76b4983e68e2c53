"""Three replicas sharing one node set (issue 17): how it splits, fails over, rebalances.

Starts three `python -m vkpy --nodes N --provider sim --leader-elect` replicas with
the same set and a shared backend state (as replicas share a cloud account), on one
control plane, with the default timings (node Lease 40 s, renewed every 10 s, the
write fence 30 s). Reports: the time until each replica holds its share and every
node is Ready; after one pod per node is Running and one replica is SIGKILLed, how
long after their last renewal its nodes were taken (target: the lease duration plus
one renewal), the time until every node is Ready again, and whether every pod kept
its UID and container ID with nothing duplicated; then the time for a replica that
joins again to get its share back. Figures, not a test: run it by hand.

    python bench/shard.py --nodes 300
"""

from __future__ import annotations

import argparse
import asyncio
import os
import platform
import signal
import sys
import tempfile
import time
from collections import Counter
from datetime import UTC, datetime
from pathlib import Path

from pods import create_bound_pods, parse_time, ready_count, until

from vkpy.devcluster import given_or_started
from vkpy.devcluster.state import free_port_range
from vkpy.kube.client import ClientOptions, KubeClient

ROOT = Path(__file__).resolve().parents[1]
LEASES = "/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases"


class Replicas:
    def __init__(self, kubeconfig: Path, workdir: Path, prefix: str, nodes: int) -> None:
        self.kubeconfig = kubeconfig
        self.workdir = workdir
        self.prefix = prefix
        self.nodes = nodes
        self.ports: list[int] = []
        for _ in range(3):  # every replica listens on every node's port: three ranges
            ends = [p for base in self.ports for p in (base, base + nodes - 1)]
            self.ports.append(free_port_range(nodes, ends))
        self.processes: dict[str, asyncio.subprocess.Process] = {}

    async def start(self, n: int) -> None:
        log = (self.workdir / f"r{n}.log").open("ab")
        self.processes[f"r{n}"] = await asyncio.create_subprocess_exec(
            sys.executable,
            "-m",
            "vkpy",
            f"--kubeconfig={self.kubeconfig}",
            f"--node-name={self.prefix}",
            f"--nodes={self.nodes}",
            f"--label=vkpy.io/bench={self.prefix}",
            "--provider=sim",
            "--node-ip=127.0.0.1",
            "--listen-address=127.0.0.1",
            f"--port={self.ports[n]}",
            f"--state-dir={self.workdir / 'state'}",
            "--leader-elect",
            f"--leader-elect-identity=r{n}",
            "--log-level=warning",
            stdout=log,
            stderr=log,
            cwd=ROOT,
        )

    async def stop_all(self) -> None:
        for process in self.processes.values():
            if process.returncode is None:
                process.terminate()
        for process in self.processes.values():
            await asyncio.wait_for(process.wait(), timeout=120)


async def holders(client: KubeClient, prefix: str) -> dict[str, dict[str, object]]:
    got = await client.get(LEASES, {"labelSelector": f"vkpy.io/node-set={prefix}"})
    return {
        lease["metadata"]["name"]: lease["spec"]
        for lease in got.get("items", [])
        if not lease["metadata"]["name"].startswith("vkpy-set-")
    }


async def pods_identity(client: KubeClient, namespace: str) -> dict[str, tuple[object, ...]]:
    got = await client.get(f"/api/v1/namespaces/{namespace}/pods")
    out = {}
    for p in got.get("items", []):
        status = (p.get("status", {}).get("containerStatuses") or [{}])[0]
        out[p["metadata"]["name"]] = (
            p["metadata"]["uid"],
            p.get("status", {}).get("phase"),
            status.get("containerID"),
            status.get("restartCount"),
        )
    return out


async def bench(args: argparse.Namespace, kubeconfig: Path, workdir: Path) -> dict[str, object]:
    client = await KubeClient.connect(ClientOptions(kubeconfig=str(kubeconfig)))
    prefix = f"bs{os.getpid()}"
    replicas = Replicas(kubeconfig, workdir, prefix, args.nodes)
    share = -(-args.nodes // 3)
    namespace = f"{prefix}-pods"
    result: dict[str, object] = {"nodes": args.nodes, "replicas": 3}
    try:
        for n in range(3):
            await replicas.start(n)

        async def split_evenly() -> bool:
            counts = Counter(
                str(s.get("holderIdentity")) for s in (await holders(client, prefix)).values()
            )
            return sorted(counts.values()) == sorted(
                [share, share, args.nodes - 2 * share]
            ) and set(counts) == {"r0", "r1", "r2"}

        async def all_ready() -> bool:
            return await ready_count(client, f"vkpy.io/bench={prefix}") == args.nodes

        result["seconds_to_an_even_split"] = round(
            await until("split", split_evenly, 600, interval=1), 1
        )
        result["seconds_to_all_ready"] = round(await until("ready", all_ready, 600, interval=1), 1)
        bindings = [(f"p{n:05d}", f"{prefix}-{n}") for n in range(args.nodes)]
        await create_bound_pods(client, namespace, bindings, 16)

        async def all_running() -> bool:
            got = await pods_identity(client, namespace)
            return len(got) == args.nodes and all(v[1] == "Running" for v in got.values())

        result["seconds_to_pods_running"] = round(
            await until("running", all_running, 600, interval=1), 1
        )
        before = await pods_identity(client, namespace)

        victim = replicas.processes["r2"]
        victim.send_signal(signal.SIGKILL)
        await victim.wait()
        killed = time.monotonic()
        held = await holders(client, prefix)
        last = {n: parse_time(str(s["renewTime"])) for n, s in held.items()}
        orphans = [n for n, s in held.items() if s["holderIdentity"] == "r2"]

        async def taken() -> bool:
            held = await holders(client, prefix)
            return all(held[n]["holderIdentity"] in ("r0", "r1") for n in orphans)

        result["killed_replicas_nodes"] = len(orphans)
        result["seconds_to_take_them_all"] = round(
            await until("takeover", taken, 600, interval=1), 1
        )
        held = await holders(client, prefix)
        gaps = sorted(
            (parse_time(str(held[n]["acquireTime"])) - last[n]).total_seconds() for n in orphans
        )
        result["taken_after_last_renewal_s_min_median_max"] = (
            round(gaps[0], 1),
            round(gaps[len(gaps) // 2], 1),
            round(gaps[-1], 1),
        )
        result["target_lease_duration_plus_one_renewal_s"] = 40 + 10
        result["seconds_from_kill_to_all_ready"] = round(
            time.monotonic() - killed + await until("ready again", all_ready, 600, interval=1), 1
        )
        after = await pods_identity(client, namespace)
        result["pods_unchanged_after_kill"] = after == before
        records = list((workdir / "state").glob("nodes/*/sim/*.json"))
        result["backend_records_per_pod"] = round(len(records) / max(1, len(after)), 3)

        await replicas.start(2)
        result["seconds_for_a_rejoining_replica_to_get_its_share"] = round(
            await until("rebalance", split_evenly, 600, interval=1), 1
        )
        await until("ready after rebalance", all_ready, 600, interval=1)
        result["pods_unchanged_after_rejoin"] = await pods_identity(client, namespace) == before
    except BaseException:
        for n in range(3):
            print((workdir / f"r{n}.log").read_text(errors="replace")[-3000:], file=sys.stderr)
        raise
    finally:
        await replicas.stop_all()
        await client.request(
            "DELETE", f"/api/v1/namespaces/{namespace}", query={"gracePeriodSeconds": 0}
        )
        await client.request(
            "DELETE", "/api/v1/nodes", query={"labelSelector": f"vkpy.io/bench={prefix}"}
        )
        await client.close()
    return result


def report(result: dict[str, object], load: str) -> str:
    rows = "\n".join(f"| {k} | {v} |" for k, v in result.items())
    return (
        f"### Three replicas sharing {result['nodes']} nodes ({datetime.now(UTC):%Y-%m-%d %H:%M} "
        f"UTC, {platform.machine()}, {os.cpu_count()} cores, load average {load})\n\n"
        f"`python bench/shard.py --nodes {result['nodes']}` (sim backend, default timings)\n\n"
        "| measure | value |\n|---|---|\n" + rows + "\n"
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=300)
    parser.add_argument("--kubeconfig", type=Path, help="existing cluster (default: start one)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="vkpy-bench-") as tmp:
        workdir = Path(tmp)
        with given_or_started(args.kubeconfig, workdir) as access:
            result = asyncio.run(bench(args, access.kubeconfig, workdir))
    load = " ".join(f"{x:.1f}" for x in os.getloadavg())
    print(report(result, load))
    return 0


if __name__ == "__main__":
    sys.exit(main())
