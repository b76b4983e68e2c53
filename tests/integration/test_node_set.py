"""Many nodes from one process against the real control plane (issue 17): `--nodes 50`
registers 50 Ready nodes with their Leases, runs pods bound to any of them through one
pod watch, serves `kubectl logs` for a pod of any node from its one listener, and
deletes each pod with exactly one DELETE."""

from __future__ import annotations

import json
import re
import urllib.request

import pytest

from tests.integration.agent import Kube, free_port, sim_pod, wait_for
from tests.integration.conftest import StartAgent
from tests.integration.test_kubelet_api import kubelet, rbac_cleanup  # noqa: F401 (fixture)
from vkpy.devcluster import ClusterAccess

NODES = 50


def agent_counts(metrics_port: int, name: str) -> dict[str, float]:
    """Every sample of one metric of the agent, by its label text."""
    with urllib.request.urlopen(f"http://127.0.0.1:{metrics_port}/metrics", timeout=30) as got:
        text = got.read().decode()
    return {
        labels: float(value)
        for labels, value in re.findall(rf"^{re.escape(name)}\{{(.*)\}} (\S+)$", text, re.M)
    }


def ready_nodes(kube: Kube, selector: str) -> list[str]:
    nodes = json.loads(kube.kubectl("get", "nodes", "-l", selector, "-o", "json"))["items"]
    return sorted(
        n["metadata"]["name"]
        for n in nodes
        if any(
            c["type"] == "Ready" and c["status"] == "True"
            for c in n["status"].get("conditions", [])
        )
    )


def one_node_reader(kube: Kube, node: str) -> str:
    """A ServiceAccount allowed to read one node's stats and pods; its token."""
    name = "one-node-reader"
    role = f"{kube.namespace}-{name}"
    kube.kubectl("create", "serviceaccount", name, "-n", kube.namespace)
    kube.kubectl(
        "create", "clusterrole", role, "--verb=get", "--resource=nodes/stats",
        "--resource=nodes/proxy", "--resource=nodes/pods", f"--resource-name={node}",
    )  # fmt: skip
    kube.kubectl(
        "create", "clusterrolebinding", role, f"--clusterrole={role}",
        f"--serviceaccount={kube.namespace}:{name}",
    )  # fmt: skip
    return kube.kubectl("create", "token", name, "-n", kube.namespace).strip()


@pytest.mark.usefixtures("rbac_cleanup")
def test_fifty_nodes_from_one_process(
    cluster: ClusterAccess, kube: Kube, start_agent: StartAgent
) -> None:
    metrics_port = free_port()
    agent = start_agent(
        args=[
            f"--nodes={NODES}",
            "--label=vkpy.io/test-set=yes",
            f"--metrics-port={metrics_port}",
            "--log-level=info",
        ],
        ports=NODES,
    )
    prefix = agent.node_name
    selector = f"kubernetes.io/hostname in ({','.join(f'{prefix}-{i}' for i in range(NODES))})"
    names = sorted(f"{prefix}-{i}" for i in range(NODES))
    try:
        wait_for(
            f"{NODES} Ready nodes",
            lambda: ready_nodes(kube, selector) == names,
            timeout=180,
            interval=1,
        )
        leases = json.loads(kube.kubectl("get", "leases", "-n", "kube-node-lease", "-o", "json"))[
            "items"
        ]
        held = {lease["spec"]["holderIdentity"] for lease in leases}
        assert set(names) <= held
        node = kube.get("node", names[7], namespaced=False)
        assert node is not None
        index = int(names[7].rsplit("-", 1)[1])  # each node its own port of the listener
        assert node["status"]["daemonEndpoints"]["kubeletEndpoint"]["Port"] == agent.port + index
        assert {"type": "InternalIP", "address": "127.0.0.1"} in node["status"]["addresses"]

        pods = {f"p{i}": names[(i * 7) % NODES] for i in range(10)}
        for pod, on in pods.items():
            kube.create(sim_pod(pod, on))
        wait_for(
            "every pod Running",
            lambda: all(kube.phase(p) == "Running" for p in pods),
            timeout=120,
            interval=1,
        )
        for pod, on in pods.items():
            obj = kube.get("pod", pod)
            assert obj is not None
            assert obj["spec"]["nodeName"] == on
            assert obj["status"]["hostIP"] == "127.0.0.1"
        # one listener for all nodes: the pod's own node's backend answers
        some = "p3"
        text = wait_for(
            "logs of a pod on another node",
            lambda: kube.kubectl("logs", "-n", kube.namespace, some, check=False),
            timeout=30,
        )
        assert text.strip()
        # node-scoped paths answer for the node asked about, not the first one, on the
        # node's own port (as the API server dials it; not through its node proxy,
        # which refuses loopback addresses), authorized against that node's name
        on = pods[some]
        token = one_node_reader(kube, on)
        port = agent.port + int(on.rsplit("-", 1)[1])
        reply = kubelet(port, "/stats/summary", token=token)
        assert reply.status == 200, reply.text
        summary = json.loads(reply.text)
        assert summary["node"]["nodeName"] == on
        assert some in {p["podRef"]["name"] for p in summary["pods"]}
        listed = json.loads(kubelet(port, "/pods", token=token).text)
        assert {p["spec"]["nodeName"] for p in listed["items"]} == {on}
        other = next(n for n in names if n != on)
        elsewhere = kubelet(
            agent.port + int(other.rsplit("-", 1)[1]), "/stats/summary", token=token
        )
        assert elsewhere.status == 403  # the role names node `on` only

        watches = agent_counts(metrics_port, "vkpy_api_requests_total")
        # for all 50 nodes: one pod watch, one Service watch (service-link variables) and
        # one watch of the set's Nodes (node_watch.py: a node marked Unknown by others)
        assert watches.get('code="started",method="WATCH"') == 3, watches

        kube.kubectl("delete", "pods", "-n", kube.namespace, "--all", "--wait=true")
        deletes = {
            k: v
            for k, v in agent_counts(metrics_port, "vkpy_api_requests_total").items()
            if 'method="DELETE"' in k
        }
        assert deletes == {'code="200",method="DELETE"': len(pods)}, deletes
    finally:
        agent.stop()
        kube.kubectl("delete", "nodes", "-l", selector, "--wait=false", check=False)
