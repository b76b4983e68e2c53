"""One node set shared by three replicas against the real control plane (issue 17):
three `python -m vkpy --nodes 30 --leader-elect` processes with the same set (and,
as replicas share a cloud account, the same sim backend state) split the 30 nodes
ten each through the nodes' own Leases. A replica SIGKILLed loses its nodes to the
other two (fifteen each), whose pods keep running with the same UIDs, container IDs
and restart counts, nothing duplicated, and `kubectl logs` reaches them through the
replica that took them; a replica joining again gets its ten back from the others.
How long the killed replica's nodes went unrenewed is printed (Lease times)."""

from __future__ import annotations

import json
import time
from collections import Counter
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest

from tests.integration.agent import Agent, Kube, pod_identity, sim_pod, wait_for
from tests.integration.test_kubelet_api import kubelet, rbac_cleanup  # noqa: F401 (fixture)
from vkpy.devcluster import ClusterAccess
from vkpy.devcluster.state import free_port_range

pytestmark = pytest.mark.timeout(900)

NODES = 30
LEASE_DURATION = 8  # the Agent's --node-lease-duration: renewals every 2 s


@pytest.fixture
def replicas(cluster: ClusterAccess, tmp_path: Path) -> Iterator[list[Agent]]:
    prefix = f"vk-sh-{int(time.time() * 1000) % 10**8}"
    state = tmp_path / "shared-state"
    bases: list[int] = []
    for _ in range(3):  # each replica listens on every node's port: --port .. --port+29
        bases.append(free_port_range(NODES, tuple(p for b in bases for p in (b, b + NODES - 1))))
    out = [
        Agent(
            cluster=cluster,
            node_name=prefix,
            state_dir=state,
            log_path=tmp_path / f"r{n}.log",
            provider="sim",
            port=bases[n],
            extra_args=[
                f"--nodes={NODES}",
                "--leader-elect",
                f"--leader-elect-identity=r{n}",
                "--log-level=info",
            ],
        )
        for n in range(3)
    ]
    yield out
    for agent in out:
        agent.stop()
    selector = f"vkpy.io/node-set={prefix}"
    cluster.run_kubectl(
        "delete", "lease", "-n", "kube-node-lease", "-l", selector, "--wait=false", check=False
    )
    nodes = [f"{prefix}-{n}" for n in range(NODES)]
    cluster.run_kubectl("delete", "node", *nodes, "--wait=false", check=False)
    for agent in out:
        print(f"--- log of {agent.log_path.stem} ---\n{agent.logs()[-6000:]}")


def leases(kube: Kube, prefix: str) -> dict[str, dict[str, Any]]:
    """The set's node Leases by node name."""
    selector = f"vkpy.io/node-set={prefix}"
    answer = kube.kubectl("get", "lease", "-n", "kube-node-lease", "-l", selector, "-o", "json")
    got = json.loads(answer)["items"]
    return {
        lease["metadata"]["name"]: lease["spec"]
        for lease in got
        if not lease["metadata"]["name"].startswith("vkpy-set-")
    }


def holders(kube: Kube, prefix: str) -> Counter[str]:
    return Counter(str(s.get("holderIdentity") or "") for s in leases(kube, prefix).values())


def held_by(kube: Kube, prefix: str, replica: str) -> list[str]:
    """The nodes whose Leases `replica` holds, by name."""
    return sorted(n for n, s in leases(kube, prefix).items() if s["holderIdentity"] == replica)


def settle(
    kube: Kube, prefix: str, ports: dict[str, int], shares: dict[str, int], timeout: float = 120
) -> None:
    """Wait until the replicas hold `shares` of the nodes and serve each node held."""
    wait_for(f"nodes held as {shares}", lambda: holders(kube, prefix) == Counter(shares), timeout)
    wait_for("every node served by its holder", lambda: served_as_held(kube, prefix, ports), 120)


def served_as_held(kube: Kube, prefix: str, ports: dict[str, int]) -> bool:
    """Every node is Ready and points at the listener of the replica holding its Lease."""
    held = leases(kube, prefix)
    nodes = json.loads(kube.kubectl("get", "nodes", "-o", "json"))["items"]
    ours = [n for n in nodes if n["metadata"]["name"].startswith(prefix + "-")]
    if len(ours) != NODES or len(held) != NODES:
        return False
    for node in ours:
        status = node.get("status", {})
        port = status.get("daemonEndpoints", {}).get("kubeletEndpoint", {}).get("Port")
        ready = any(
            c["type"] == "Ready" and c["status"] == "True" for c in status.get("conditions", [])
        )
        name = node["metadata"]["name"]
        holder = held[name].get("holderIdentity")
        index = int(name.rsplit("-", 1)[1])  # node i: the holder's --port + i
        if not ready or holder not in ports or port != ports[holder] + index:
            return False
    return True


def identity(kube: Kube) -> dict[str, Any]:
    """What must not change when a node moves to another replica, per pod."""
    return {pod["metadata"]["name"]: pod_identity(pod) for pod in kube.list("pods")}


def parse(text: str) -> datetime:
    return datetime.fromisoformat(text.replace("Z", "+00:00"))


def stats_reader(kube: Kube) -> str:
    """A ServiceAccount allowed to read nodes' stats (as metrics-server); its token."""
    role = f"{kube.namespace}-stats-reader"
    kube.kubectl("create", "serviceaccount", "stats-reader", "-n", kube.namespace)
    kube.kubectl("create", "clusterrole", role, "--verb=get", "--resource=nodes/stats")
    kube.kubectl(
        "create", "clusterrolebinding", role, f"--clusterrole={role}",
        f"--serviceaccount={kube.namespace}:stats-reader",
    )  # fmt: skip
    return kube.kubectl("create", "token", "stats-reader", "-n", kube.namespace).strip()


@pytest.mark.usefixtures("rbac_cleanup")
def test_three_replicas_share_thirty_nodes(kube: Kube, replicas: list[Agent]) -> None:
    prefix = replicas[0].node_name
    ports = {f"r{n}": agent.port for n, agent in enumerate(replicas)}
    for agent in replicas:
        agent.start()
    settle(kube, prefix, ports, {"r0": 10, "r1": 10, "r2": 10}, timeout=180)  # ten each

    names = [f"sh{n}" for n in range(NODES)]
    for n, name in enumerate(names):
        kube.create(sim_pod(name, f"{prefix}-{n}"))
    wait_for(
        "pods Running",
        lambda: all(kube.phase(n) == "Running" for n in names),
        timeout=120,
    )
    before = identity(kube)
    # node-scoped kubelet paths answer for the node asked about, from its holder, on
    # the port the Node advertises (as the API server dials it)
    token = stats_reader(kube)
    for node in held_by(kube, prefix, "r1")[:2]:
        obj = kube.get("node", node, namespaced=False) or {}
        port = obj["status"]["daemonEndpoints"]["kubeletEndpoint"]["Port"]
        reply = kubelet(port, "/stats/summary", token=token)
        assert reply.status == 200, reply.text
        summary = json.loads(reply.text)
        assert summary["node"]["nodeName"] == node
        pod = names[int(node.rsplit("-", 1)[1])]
        assert [p["podRef"]["name"] for p in summary["pods"]] == [pod]

    # SIGKILL: r2's nodes go to r0 and r1 once their Leases have run out
    victim = replicas[2]
    victim.kill()
    held = leases(kube, prefix)
    last = {n: parse(s["renewTime"]) for n, s in held.items()}
    orphans = {n for n, s in held.items() if s["holderIdentity"] == "r2"}
    assert len(orphans) == 10
    settle(kube, prefix, ports, {"r0": 15, "r1": 15})  # fifteen each for the survivors
    after = leases(kube, prefix)
    gaps = [(parse(after[n]["acquireTime"]) - last[n]).total_seconds() for n in orphans]
    print(
        f"killed replica's nodes taken {min(gaps):.1f}-{max(gaps):.1f} s after their last "
        f"renewal (lease duration {LEASE_DURATION} s, renewals every {LEASE_DURATION / 4} s)"
    )
    assert identity(kube) == before
    moved = next(n for n in names if f"{prefix}-{names.index(n)}" in orphans)
    assert kube.log_tail(moved).startswith("line ")
    # nothing duplicated: one backend record per pod, across every node's backend
    records = [p.stem for p in victim.state_dir.glob("nodes/*/sim/*.json")]
    assert sorted(records) == sorted(uid for uid, *_ in before.values())

    # a replica joining gets its share: the others give nodes back, nothing restarts
    victim.start()
    settle(kube, prefix, ports, {"r0": 10, "r1": 10, "r2": 10})  # ten each again
    assert identity(kube) == before
    back = held_by(kube, prefix, "r2")
    pod = names[int(back[0].rsplit("-", 1)[1])]
    assert kube.log_tail(pod).startswith("line ")
    assert all(a.alive() for a in replicas)
