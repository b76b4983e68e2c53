"""Probes on the ACI node: ACI (our emulator) runs the container group's liveness and
readiness probes; a failing liveness probe gets the container restarted, and kubectl
shows it (restart count, the probe's Events); passing probes leave the pod Ready.
"""
# ruff: noqa: F811 - pytest fixtures are imported by name and then requested as arguments

from __future__ import annotations

import socket
from typing import Any

from tests.integration.aci_fixtures import AciSetup, aci, aci_emulator  # noqa: F401
from tests.integration.agent import Kube, wait_for
from tests.integration.conftest import StartAgent
from tests.integration.test_aci_agent import aci_pod, start_aci


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def test_failing_liveness_restarts_and_passing_probes_make_the_pod_ready(
    kube: Kube, start_agent: StartAgent, aci: AciSetup
) -> None:
    agent = start_aci(start_agent, aci)
    resources = {"requests": {"cpu": "100m", "memory": "100M"}}
    sick = {
        "name": "app",
        "image": "busybox",
        "command": ["sh", "-c", "echo up; exec sleep 3600"],
        "resources": resources,
        "livenessProbe": {
            "exec": {"command": ["cat", "/nonexistent/healthy"]},
            "periodSeconds": 1,
            "failureThreshold": 2,
        },
    }
    port = free_port()
    web = {
        "name": "web",
        "image": "python",
        "command": ["python3", "-m", "http.server", str(port), "--bind", "127.0.0.1"],
        "ports": [{"containerPort": port}],
        "resources": resources,
        "livenessProbe": {"exec": {"command": ["true"]}, "periodSeconds": 1},
        "readinessProbe": {"httpGet": {"path": "/", "port": port}, "periodSeconds": 1},
    }
    kube.create(aci_pod("sick", agent.node_name, [sick]))
    kube.create(aci_pod("web", agent.node_name, [web]))

    def restarted() -> Any:
        pod = kube.get("pod", "sick")
        status = ((pod or {}).get("status", {}).get("containerStatuses") or [{}])[0]
        last = (status.get("lastState") or {}).get("terminated") or {}
        return status.get("restartCount", 0) >= 1 and last.get("exitCode") == 137 and status

    wait_for("the sick container restarted by its liveness probe", restarted, timeout=90)

    def probe_events() -> Any:
        found = {e["reason"]: e["message"] for e in kube.events("sick")}
        return "Unhealthy" in found and "Killing" in found and found

    found = wait_for("the probe's events on the pod", probe_events, timeout=60)
    assert found["Unhealthy"].startswith("Liveness probe failed")
    assert "/nonexistent/healthy" in found["Unhealthy"]
    assert "failed liveness probe" in found["Killing"]

    def ready() -> Any:
        pod = kube.get("pod", "web") or {}
        conditions = {c["type"]: c["status"] for c in pod.get("status", {}).get("conditions", [])}
        return conditions.get("Ready") == "True" and pod

    pod = wait_for("the web pod Ready", ready, timeout=90)
    status = pod["status"]["containerStatuses"][0]
    assert status["ready"] and status["restartCount"] == 0
    # its liveness probe passes (a readiness failure while the server started is fine:
    # ACI's instance view has no readiness, see docs/aci-backend.md)
    unhealthy = [e["message"] for e in kube.events("web") if e["reason"] == "Unhealthy"]
    assert not [m for m in unhealthy if m.startswith("Liveness")]
