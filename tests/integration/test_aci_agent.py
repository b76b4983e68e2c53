"""Pods on a virtual node backed by Azure Container Instances, emulated by our own
ACI emulator (tests/aci_emulator), through the real control plane: `python -m vkpy
--provider aci` as a process, talking to the emulator through the real Azure SDK and
azure-identity; pods created and read with the pinned kubectl, `kubectl logs` and
`kubectl exec` through the API server.
"""
# ruff: noqa: F811 - pytest fixtures are imported by name and then requested as arguments

from __future__ import annotations

from typing import Any

from tests.integration.aci_fixtures import AciSetup, aci, aci_emulator  # noqa: F401
from tests.integration.agent import Agent, Kube, wait_for
from tests.integration.conftest import StartAgent
from vkpy.providers.aci.naming import group_name
from vkpy.providers.base import PodRef


def aci_pod(
    name: str, node: str, containers: list[dict[str, Any]] | None = None, **spec: Any
) -> dict[str, Any]:
    """The seed's shape: scheduled onto the virtual node by its labels and taint."""
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "annotations": spec.pop("annotations", {})},
        "spec": {
            "nodeSelector": {"type": "virtual-kubelet", "kubernetes.io/hostname": node},
            "tolerations": [
                {"key": "virtual-kubelet.io/provider", "operator": "Exists", "effect": "NoSchedule"}
            ],
            "containers": containers
            or [
                {
                    "name": "hello",
                    "image": "mcr.microsoft.com/azuredocs/aci-helloworld",
                    "command": ["sh", "-c", "echo hello from aci; exec sleep 3600"],
                    "ports": [{"containerPort": 80}],
                    "resources": {"requests": {"cpu": "500m", "memory": "1Gi"}},
                }
            ],
            **spec,
        },
    }


def ref_of(pod: dict[str, Any]) -> PodRef:
    m = pod["metadata"]
    return PodRef(m["namespace"], m["name"], m["uid"])


def phase_is(kube: Kube, name: str, phase: str) -> Any:
    return lambda: (p := kube.get("pod", name)) and p["status"].get("phase") == phase and p


def events(kube: Kube, name: str) -> dict[str, str]:
    return {e["reason"]: e["message"] for e in kube.events(name)}


def start_aci(start_agent: StartAgent, aci: AciSetup, **overrides: Any) -> Agent:
    return start_agent(provider="aci", config=aci.config(**overrides))


def test_seed_pod_runs_shows_the_group_ip_logs_and_is_deleted(
    kube: Kube, start_agent: StartAgent, aci: AciSetup
) -> None:
    agent = start_aci(start_agent, aci)
    created = kube.create(aci_pod("hello", agent.node_name))
    running = wait_for("Running", phase_is(kube, "hello", "Running"), timeout=90)
    name = group_name(ref_of(created))
    group = aci.emulator.group(name, aci.resource_group)
    assert group is not None
    assert running["status"]["podIP"] == group.ip
    wide = kube.kubectl("get", "pod", "hello", "-n", kube.namespace, "-o", "wide")
    assert group.ip in wide and agent.node_name in wide
    status = running["status"]["containerStatuses"][0]
    assert status["ready"] is True and "running" in status["state"]
    assert "1.1 GB" in running["status"]["message"]  # 1Gi rounded up to ACI's 0.1 GB steps
    model = group.model
    assert model.tags["vkpy.io/node"] == agent.node_name
    assert model.tags["vkpy.io/pod-uid"] == created["metadata"]["uid"]
    assert model.containers[0].resources.requests.cpu == 0.5
    assert model.ip_address.type == "Public" and model.ip_address.ports[0].port == 80
    assert {v.name for v in model.volumes} == {
        v["name"] for v in running["spec"]["volumes"]
    }  # the service account token volume, as an ACI secret volume
    wait_for(
        "the log line",
        lambda: kube.kubectl("logs", "-n", kube.namespace, "hello") == "hello from aci\n",
    )
    wait_for("ACI's events as pod Events", lambda: "Pulled" in events(kube, "hello"))
    kube.kubectl("delete", "pod", "hello", "-n", kube.namespace, "--timeout=60s")
    assert aci.emulator.group(name, aci.resource_group) is None
