"""High availability: three `python -m vkpy --leader-elect` replicas for one node name,
against the real control plane, sharing one backend (the sim backend's state
directory, as replicas share a cloud account). Killing the leader (SIGKILL) or
stopping it (SIGTERM) hands the node to a standby, which points the Node at its own
kubelet port, adopts the backend's pods and carries on: the pods stay Running with
the same UIDs, restart counts and backend identity, nothing is duplicated, and
`kubectl logs` reaches the pods through the new leader. Failover times are printed."""

from __future__ import annotations

import json
import signal
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.integration.agent import Agent, Kube, free_port, pod_identity, sim_pod, wait_for
from vkpy.devcluster import ClusterAccess

# Where the replicas' leader Lease is by default outside a cluster (vkpy.app.cli): never in
# kube-node-lease, where the node's own heartbeat Lease is (issue 27).
LEADER_NS = "default"
# Shorter than the defaults (15/10/2) so the test is quick; the rules are the same.
ELECTION = [
    "--leader-elect",
    "--leader-elect-lease-duration=8",
    "--leader-elect-renew-deadline=5",
    "--leader-elect-retry-period=1",
]


@pytest.fixture
def replicas(cluster: ClusterAccess, tmp_path: Path) -> Iterator[list[Agent]]:
    node = f"vk-ha-{int(time.time() * 1000) % 10**8}"
    state = tmp_path / "shared-state"
    health_ports = [free_port() for _ in range(3)]
    out = [
        Agent(
            cluster=cluster,
            node_name=node,
            state_dir=state,
            log_path=tmp_path / f"r{n}.log",
            provider="sim",
            extra_args=[
                *ELECTION,
                f"--leader-elect-identity=r{n}",
                "--health-bind-address=127.0.0.1",
                f"--health-port={health_ports[n]}",
            ],
        )
        for n in range(3)
    ]
    yield out
    for agent in out:
        agent.stop()
    cluster.run_kubectl("delete", "node", node, "--wait=false", check=False)
    cluster.run_kubectl(
        "delete", "lease", "-n", LEADER_NS, f"vkpy-{node}", "--wait=false", check=False
    )
    for agent in out:
        print(f"--- log of {agent.log_path.stem} ---\n{agent.logs()[-12000:]}")


def probe(agent: Agent, path: str) -> int:
    """The status of GET <path> on the replica's --health-port (0: no answer)."""
    port = next(a.split("=")[1] for a in agent.extra_args if a.startswith("--health-port="))
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=5) as answer:
            return int(answer.status)
    except urllib.error.HTTPError as error:
        return int(error.code)
    except OSError:
        return 0


def holder(kube: Kube, node: str) -> str:
    out = kube.kubectl(
        "get", "lease", "-n", LEADER_NS, f"vkpy-{node}", "-o", "json", "--ignore-not-found"
    )
    lease = json.loads(out) if out.strip() else {}
    return str(lease.get("spec", {}).get("holderIdentity") or "")


def node_port_and_ready(kube: Kube, node: str) -> tuple[int, str]:
    obj = kube.get("node", node, namespaced=False) or {}
    status = obj.get("status", {})
    port = int(status.get("daemonEndpoints", {}).get("kubeletEndpoint", {}).get("Port") or 0)
    ready = next((c["status"] for c in status.get("conditions", []) if c["type"] == "Ready"), "")
    return port, ready


def identity(kube: Kube, names: list[str]) -> dict[str, Any]:
    """What must not change across a failover, per pod."""
    return {name: pod_identity(kube.get("pod", name) or {}) for name in names}


def fail_over(kube: Kube, replicas: list[Agent], leader: Agent, sig: int) -> tuple[Agent, float]:
    node = leader.node_name
    started = time.monotonic()
    leader.signal(sig)
    by_name = {f"r{n}": agent for n, agent in enumerate(replicas)}
    new = wait_for(
        "a standby to take the Lease",
        lambda: (h := holder(kube, node)) not in ("", leader.log_path.stem) and by_name[h],
        timeout=60,
    )
    wait_for(
        "the Node to point at the new leader and be Ready",
        lambda: node_port_and_ready(kube, node) == (new.port, "True"),
        timeout=60,
    )
    return new, time.monotonic() - started


def test_failover_keeps_pods_running_and_nothing_duplicated(
    kube: Kube, replicas: list[Agent]
) -> None:
    node = replicas[0].node_name
    for agent in replicas:
        agent.start()
    by_name = {f"r{n}": agent for n, agent in enumerate(replicas)}
    leader = by_name[wait_for("a leader", lambda: holder(kube, node), timeout=60)]
    wait_for("node Ready", lambda: node_port_and_ready(kube, node) == (leader.port, "True"))
    names = [f"ha{n}" for n in range(3)]
    for name in names:
        kube.create(sim_pod(name, node))
    wait_for("pods Running", lambda: all(kube.phase(n) == "Running" for n in names))
    before = identity(kube, names)
    standbys = [a for a in replicas if a is not leader]
    assert all(a.alive() for a in standbys)
    assert all("became the leader" not in a.logs() for a in standbys)
    # every replica answers its pod's probes: alive and ready, leading or standing by
    for agent in replicas:
        wait_for(
            "healthz and readyz 200",
            lambda a=agent: probe(a, "/healthz") == 200 == probe(a, "/readyz"),
        )

    leader, killed = fail_over(kube, replicas, leader, signal.SIGKILL)
    print(f"failover after SIGKILL of the leader: {killed:.1f} s (lease duration 8 s)")
    assert identity(kube, names) == before
    assert kube.log_tail("ha0").startswith("line ")  # through the new leader
    kube.create(sim_pod("after-kill", node))
    wait_for("a new pod Running", lambda: kube.phase("after-kill") == "Running")
    names.append("after-kill")
    before = identity(kube, names)

    old = leader
    leader, stopped = fail_over(kube, replicas, leader, signal.SIGTERM)
    assert old.process is not None and old.process.returncode == 0
    assert "released the leader Lease" in old.logs()
    print(f"failover after SIGTERM of the leader: {stopped:.1f} s (released Lease)")
    assert identity(kube, names) == before
    assert all(kube.phase(n) == "Running" for n in names)
    assert kube.log_tail("ha1").startswith("line ")

    # nothing duplicated: one backend record per pod, and one pod per name
    records = {p.stem for p in (replicas[0].state_dir / "sim").glob("*.json")}
    assert records == {before[n][0] for n in names}
    assert len(kube.list("pods")) == len(names)
    transitions = json.loads(
        kube.kubectl("get", "lease", "-n", LEADER_NS, f"vkpy-{node}", "-o", "json")
    )["spec"]["leaseTransitions"]
    assert transitions == 2

    # a leader frozen (SIGSTOP: as if cut off) is replaced; once it runs again its
    # right to write has run out: it writes nothing, says so, and exits to be restarted
    # as a standby, while the Node stays with the new leader
    standby = next(a for a in replicas if not a.alive())
    standby.start()
    wait_for("the restarted replica ready", lambda: probe(standby, "/readyz") == 200)
    frozen = leader
    assert frozen.process is not None
    frozen.process.send_signal(signal.SIGSTOP)
    try:
        leader = by_name[
            wait_for(
                "the standby to take over from the frozen leader",
                lambda: (h := holder(kube, node)) not in ("", frozen.log_path.stem) and h,
                timeout=60,
            )
        ]
        wait_for(
            "the Node to point at the new leader",
            lambda: node_port_and_ready(kube, node) == (leader.port, "True"),
        )
    finally:
        frozen.process.send_signal(signal.SIGCONT)
    assert frozen.process.wait(timeout=60) == 1
    assert "leadership lost" in frozen.logs()
    assert node_port_and_ready(kube, node) == (leader.port, "True")
    assert identity(kube, names) == before
    assert kube.log_tail("ha2").startswith("line ")
