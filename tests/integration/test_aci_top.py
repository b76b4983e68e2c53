"""`kubectl top pod` and `kubectl top node` for a node of the ACI backend, through the
real metrics-server: it scrapes the node's `/metrics/resource` (figures the backend
reads from the emulator's Azure Monitor route, measured on the group's real local
processes) and verifies the node's serving certificate against the kubelet-serving CA,
so the node is started with a certificate from that CA, as the dev cluster's nodes are.
"""
# ruff: noqa: F811 - pytest fixtures are imported by name and then requested as arguments

from __future__ import annotations

from pathlib import Path

from tests.integration.aci_fixtures import AciSetup, aci, aci_emulator  # noqa: F401
from tests.integration.agent import Kube, wait_for
from tests.integration.conftest import StartAgent
from tests.integration.test_aci_agent import aci_pod, phase_is
from vkpy.devcluster import DevCluster
from vkpy.devcluster.nodes import issue_serving_cert


def top(kube: Kube, *args: str) -> dict[str, int]:
    """`kubectl top ...` as {name: CPU millicores}; {} while metrics are missing."""
    got = kube.cluster.run_kubectl("top", *args, "--no-headers", check=False)
    if got.returncode != 0:
        return {}
    table: dict[str, int] = {}
    for line in got.stdout.splitlines():
        fields = line.split()
        if len(fields) >= 2 and fields[1].endswith("m"):
            table[fields[0]] = int(fields[1][:-1])
    return table


def test_kubectl_top_shows_a_busy_aci_pod_and_its_node(
    local_cluster: DevCluster, kube: Kube, start_agent: StartAgent, aci: AciSetup, tmp_path: Path
) -> None:
    local_cluster.start_metrics_server()
    cert = issue_serving_cert("vkpy-aci", tmp_path / "serving", local_cluster.pki)
    tls = [f"--tls-cert-file={cert.cert}", f"--tls-private-key-file={cert.key}"]
    agent = start_agent(provider="aci", config=aci.config(), args=tls)

    burn = {
        "name": "burn",
        "image": "busybox",
        "command": ["sh", "-c", "while true; do :; done"],
        "resources": {"requests": {"cpu": "500m", "memory": "100M"}},
    }
    kube.create(aci_pod("busy", agent.node_name, [burn]))
    try:
        show_top(kube, agent.node_name)
    finally:
        # The emulator lives for the whole session: a group left behind would burn a
        # core until the last test.
        kube.kubectl("delete", "pod", "busy", "-n", kube.namespace, "--timeout=60s")


def show_top(kube: Kube, node_name: str) -> None:
    """Wait until `kubectl top` shows the busy pod and its node burning CPU."""
    wait_for("busy Running", phase_is(kube, "busy", "Running"), timeout=60)

    pods = wait_for(
        "kubectl top pod to show the busy pod burning CPU",
        lambda: (t := top(kube, "pod", "-n", kube.namespace)) and t.get("busy", 0) >= 50 and t,
        timeout=60,
    )
    nodes = wait_for(
        "kubectl top node to list the ACI node",
        lambda: (t := top(kube, "node")).get(node_name, 0) >= 50 and t,
        timeout=30,
    )
    print(f"\nkubectl top pod: {pods}\nkubectl top node: {nodes}")
