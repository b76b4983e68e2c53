"""The virtual node as the control plane sees it: registration, heartbeat, lease."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
from datetime import datetime
from pathlib import Path

from tests.integration.agent import Kube, sim_pod, wait_for
from tests.integration.conftest import StartAgent
from vkpy.devcluster import ClusterAccess


def ready_status(kube: Kube, node: str) -> str | None:
    obj = kube.get("node", node, namespaced=False)
    if obj is None:
        return None
    for condition in obj.get("status", {}).get("conditions", []):
        if condition["type"] == "Ready":
            return str(condition["status"])
    return None


def test_node_registers_ready_with_labels_taint_capacity_and_info(
    cluster: ClusterAccess, start_agent: StartAgent
) -> None:
    agent = start_agent(config={"capacity": {"nvidia.com/gpu": "2", "cpu": "64"}})
    kube = Kube(cluster)
    wait_for("node Ready", lambda: ready_status(kube, agent.node_name) == "True", timeout=30)
    node = kube.get("node", agent.node_name, namespaced=False)
    assert node is not None
    labels = node["metadata"]["labels"]
    assert labels["type"] == "virtual-kubelet"
    assert labels["kubernetes.io/role"] == "agent"
    assert labels["kubernetes.io/hostname"] == agent.node_name
    assert labels["kubernetes.io/os"] == "linux"
    assert labels["kubernetes.io/arch"] == "amd64"
    taints = node["spec"]["taints"]
    assert {"key": "virtual-kubelet.io/provider", "value": "sim", "effect": "NoSchedule"} in taints
    status = node["status"]
    assert status["capacity"]["nvidia.com/gpu"] == "2"
    assert status["capacity"]["cpu"] == "64"
    assert status["allocatable"]["pods"]
    info = status["nodeInfo"]
    assert info["kubeletVersion"].startswith("v1.36.0-vkpy-")
    assert info["containerRuntimeVersion"].startswith("sim://")
    assert {"type": "InternalIP", "address": "127.0.0.1"} in status["addresses"]
    assert status["daemonEndpoints"]["kubeletEndpoint"]["Port"] == agent.port
    types = {c["type"] for c in status["conditions"]}
    assert {"Ready", "MemoryPressure", "DiskPressure", "PIDPressure"} <= types


def test_lease_is_renewed_and_owned_by_the_node(
    cluster: ClusterAccess, start_agent: StartAgent
) -> None:
    agent = start_agent()
    lease_kube = Kube(cluster, "kube-node-lease")

    def renew_time() -> str | None:
        lease = lease_kube.get("lease", agent.node_name)
        return None if lease is None else lease["spec"].get("renewTime")

    first = wait_for("lease", renew_time, timeout=30)
    later = wait_for("lease renewal", lambda: (t := renew_time()) != first and t, timeout=20)
    assert datetime.fromisoformat(later) > datetime.fromisoformat(first)
    lease = lease_kube.get("lease", agent.node_name)
    assert lease is not None
    assert lease["spec"]["holderIdentity"] == agent.node_name
    assert lease["spec"]["leaseDurationSeconds"] == 8
    owner = lease["metadata"]["ownerReferences"][0]
    node = Kube(cluster).get("node", agent.node_name, namespaced=False)
    assert node is not None
    assert (owner["kind"], owner["name"], owner["uid"]) == (
        "Node",
        agent.node_name,
        node["metadata"]["uid"],
    )


def test_node_goes_unknown_when_vkpy_stops_and_ready_when_it_returns(
    cluster: ClusterAccess, start_agent: StartAgent
) -> None:
    agent = start_agent()
    kube = Kube(cluster)
    wait_for("node Ready", lambda: ready_status(kube, agent.node_name) == "True", timeout=30)
    assert agent.signal(signal.SIGTERM) == 0
    wait_for(
        "node lifecycle controller to mark the node Unknown",
        lambda: ready_status(kube, agent.node_name) == "Unknown",
        timeout=90,
    )
    agent.start()
    wait_for("node Ready again", lambda: ready_status(kube, agent.node_name) == "True", timeout=30)
    node = kube.get("node", agent.node_name, namespaced=False)
    assert node is not None
    keys = {t["key"] for t in node["spec"].get("taints", [])}
    wait_for(
        "unreachable taint removed",
        lambda: (
            "node.kubernetes.io/unreachable"
            not in {
                t["key"]
                for t in (kube.get("node", agent.node_name, namespaced=False) or {})
                .get("spec", {})
                .get("taints", [])
            }
        ),
        timeout=30,
    )
    assert "virtual-kubelet.io/provider" in keys


def test_bad_flags_and_unreachable_api_server_fail_clearly(
    cluster: ClusterAccess, tmp_path: object
) -> None:
    bad_taint = subprocess.run(
        [sys.executable, "-m", "vkpy", f"--kubeconfig={cluster.kubeconfig}", "--taint=oops"],
        check=False,
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert bad_taint.returncode == 2
    assert "invalid taint 'oops'" in bad_taint.stderr

    missing = subprocess.run(
        [sys.executable, "-m", "vkpy", "--kubeconfig=/nonexistent/kubeconfig"],
        check=False,
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert missing.returncode == 2
    assert "no such file" in missing.stderr

    config = json.loads(cluster.run_kubectl("config", "view", "--raw", "-o", "json").stdout)
    config["clusters"][0]["cluster"]["server"] = "https://127.0.0.1:1"
    path = f"{tmp_path}/unreachable.kubeconfig"
    with open(path, "w") as handle:
        json.dump(config, handle)
    unreachable = subprocess.run(
        [sys.executable, "-m", "vkpy", f"--kubeconfig={path}", "--startup-timeout=2"],
        check=False,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert unreachable.returncode == 1
    assert "cannot reach the API server" in unreachable.stderr


def test_kubeconfig_path_list_and_current_context_on_a_second_cluster(
    cluster: ClusterAccess, start_agent: StartAgent, tmp_path: Path, namespace: str
) -> None:
    """KUBECONFIG=a:b, and the current context on the second of two clusters: vkpy reads
    them as its API client does, so the node's InternalIP is the address towards the
    real server and the API server reaches the kubelet API (with its client certificate,
    trusted because vkpy took the right cluster's CA): kubectl logs works."""
    real = json.loads(cluster.run_kubectl("config", "view", "--raw", "-o", "json").stdout)
    user = real["users"][0]["name"]
    decoy_cluster = {"name": "aaa-decoy", "cluster": {"server": "https://[::1]:1"}}
    real["clusters"].insert(0, decoy_cluster)
    real["contexts"].insert(
        0, {"name": "aaa-decoy", "context": {"cluster": "aaa-decoy", "user": user}}
    )
    assert real["current-context"] != "aaa-decoy"
    decoy = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "other", "cluster": {"server": "https://[::1]:2"}}],
        "contexts": [{"name": "other", "context": {"cluster": "other", "user": "other"}}],
        "users": [{"name": "other", "user": {"token": "not-used"}}],
    }
    first, second = tmp_path / "decoy.kubeconfig", tmp_path / "real.kubeconfig"
    first.write_text(json.dumps(decoy))
    second.write_text(json.dumps(real))
    agent = start_agent(kubeconfig_env=f"{first}:{second}")
    kube = Kube(cluster)
    wait_for("node Ready", lambda: ready_status(kube, agent.node_name) == "True", timeout=60)
    node = kube.get("node", agent.node_name, namespaced=False)
    assert node is not None
    assert {"type": "InternalIP", "address": "127.0.0.1"} in node["status"]["addresses"]
    pods = Kube(cluster, namespace)
    pods.create(sim_pod("talker", agent.node_name))
    wait_for("Running", lambda: pods.phase("talker") == "Running", timeout=60)
    wait_for(
        "kubectl logs through the API server",
        lambda: pods.kubectl("logs", "-n", namespace, "talker").strip(),
    )
