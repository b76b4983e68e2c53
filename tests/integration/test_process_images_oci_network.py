"""`runtime: oci` with `network: pod`: two busybox pods from a real registry both
serve HTTP on port 80 (root in the pod binds it: the pod's user namespace owns its
network namespace), each at its own address from the pod CIDR, and `kubectl
port-forward` reaches each inside its sandbox's network namespace.

As test_process_pod_network.py, everything runs in a network namespace this test
makes (vkpy.devcluster.netns): the control plane, the registry, the vkpy node and the
test's connections; nothing reaches or changes the host's interfaces."""

# ruff: noqa: F811 - pytest fixtures are imported by name and then requested as arguments
from __future__ import annotations

import ipaddress
import json
import os
import subprocess
import tempfile
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.integration.agent import Agent, Kube, free_port, wait_for
from tests.integration.oci_fixtures import busybox_registry
from tests.integration.process_fixtures import FAST
from tests.integration.test_process_pod_network import (  # noqa: F401 - fixtures
    netns_cluster,
    node_network,
)
from tests.namespaces import wait_for_default_service_account
from tests.registry import Registry
from vkpy.devcluster import ClusterAccess
from vkpy.devcluster.netns import NODE_IP

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="runtime: oci and pod networks need root")

POD_CIDR = "10.244.8.0/24"
SERVE = "mkdir -p /www && echo $POD_NAME > /www/index.html && exec httpd -f -p 80 -h /www"


def web_pod(name: str, node: str, image: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name},
        "spec": {
            "nodeName": node,
            "terminationGracePeriodSeconds": 2,
            "containers": [
                {
                    "name": "web",
                    "image": image,
                    "command": ["sh", "-c", SERVE],
                    "env": [
                        {
                            "name": "POD_NAME",
                            "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}},
                        }
                    ],
                    "readinessProbe": {"httpGet": {"port": 80}, "periodSeconds": 1},
                }
            ],
            "tolerations": [{"operator": "Exists"}],
        },
    }


def ready_ip(kube: Kube, name: str) -> str | None:
    status = (kube.get("pod", name) or {}).get("status") or {}
    conditions = {c["type"]: c["status"] for c in status.get("conditions") or []}
    if conditions.get("Ready") == "True":
        return str(status.get("podIP"))
    return None


def http_get(host: str, port: int) -> str:
    with urllib.request.urlopen(f"http://{host}:{port}/", timeout=10) as response:
        return str(response.read().decode())


def port_forward_get(access: ClusterAccess, namespace: str, pod: str) -> str:
    local = free_port()
    client = subprocess.Popen(
        [str(access.kubectl), f"--kubeconfig={access.kubeconfig}", "-n", namespace,
         "port-forward", f"pod/{pod}", f"{local}:80", "--address=127.0.0.1"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )  # fmt: skip
    try:
        assert client.stdout is not None
        line = client.stdout.readline().decode()
        assert line.startswith("Forwarding from 127.0.0.1:"), line
        return http_get("127.0.0.1", local)
    finally:
        client.terminate()
        client.wait(timeout=10)


@pytest.fixture
def netns_registry(netns_cluster: ClusterAccess, tmp_path: Path) -> Iterator[Registry]:
    with busybox_registry(tmp_path / "registry") as running:  # in the test's namespace
        yield running


def test_two_oci_pods_serve_port_80_each_at_its_own_address(
    netns_cluster: ClusterAccess, netns_registry: Registry, tmp_path: Path
) -> None:
    access = netns_cluster
    kube = Kube(access, "default")
    wait_for_default_service_account(access.run_kubectl, "default")
    state = tmp_path / "node"
    state.mkdir()
    pods_dir = Path(tempfile_dir())
    settings = {
        **FAST,
        "runtime": "oci",
        "network": "pod",
        "pod_cidr": POD_CIDR,
        "pods_dir": str(pods_dir),
        "registries": {
            netns_registry.host: {"insecure": True},
            "registry.k8s.io": {"mirrors": [f"http://{netns_registry.host}"]},
        },
    }
    config = state / "provider.json"
    config.write_text(json.dumps(settings))
    agent = Agent(
        cluster=access,
        node_name="vk-ocinet",
        state_dir=state / "state",
        log_path=tmp_path / "vkpy.log",
        provider="process",
        provider_config=config,
        extra_args=[f"--node-ip={NODE_IP}", "--listen-address=0.0.0.0"],
    )
    agent.start()
    image = f"{netns_registry.host}/library/busybox:latest"
    try:
        wait_for("the node", lambda: kube.get("node", "vk-ocinet", namespaced=False), 60)
        for name in ("a", "b"):
            kube.apply(web_pod(name, "vk-ocinet", image))
        ips = {name: wait_for(f"{name} Ready", lambda n=name: ready_ip(kube, n), 90)
               for name in ("a", "b")}  # fmt: skip
        assert ips["a"] != ips["b"]
        for name, ip in ips.items():
            assert ipaddress.IPv4Address(ip) in ipaddress.IPv4Network(POD_CIDR)
            assert http_get(ip, 80).strip() == name  # from the node, at the pod's address
            assert port_forward_get(access, "default", name).strip() == name
        kube.kubectl("delete", "pod", "a", "b", "--wait=true", "--timeout=60s")
    finally:
        agent.stop()
        subprocess.run(["rm", "-rf", str(pods_dir)], check=False)


def tempfile_dir() -> str:
    """A pods_dir whose ancestors the pods' mapped root can traverse."""
    path = tempfile.mkdtemp(prefix="vkpy-ocinet-")
    os.chmod(path, 0o711)
    return path
