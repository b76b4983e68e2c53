"""gRPC probes on the process backend (issue 18): the container runs a real gRPC
health server (grpcio's); a readiness probe on a SERVING server makes the pod Ready,
a liveness probe on a NOT_SERVING service restarts the container with the kubelet's
Unhealthy message."""

# ruff: noqa: F811 - pytest fixtures are imported by name and then requested as arguments
from __future__ import annotations

import sys

from tests.integration.agent import Kube, free_port, wait_for
from tests.integration.process_fixtures import (  # noqa: F401 - fixtures
    StartProcessAgent,
    condition,
    process_pod,
    start_process_agent,
    status_of,
)

SERVER = """
import asyncio, grpc
from grpc_health.v1 import health, health_pb2, health_pb2_grpc

async def main():
    servicer = health.aio.HealthServicer()
    server = grpc.aio.server()
    health_pb2_grpc.add_HealthServicer_to_server(servicer, server)
    server.add_insecure_port("127.0.0.1:{port}")
    await server.start()
    await servicer.set("", health_pb2.HealthCheckResponse.SERVING)
    await servicer.set("down", health_pb2.HealthCheckResponse.NOT_SERVING)
    await server.wait_for_termination()

asyncio.run(main())
"""


def _server(port: int) -> dict[str, object]:
    return {"command": [sys.executable, "-c", SERVER.format(port=port)]}


def test_grpc_readiness_and_liveness_probes(
    kube: Kube, start_process_agent: StartProcessAgent
) -> None:
    agent = start_process_agent()
    ready_port, live_port = free_port(), free_port()
    readiness = {"grpc": {"port": ready_port}, "periodSeconds": 1}
    kube.create(
        process_pod(
            "grpc-ready",
            agent.node_name,
            "",
            "Always",
            container={**_server(ready_port), "readinessProbe": readiness},
        )
    )
    liveness = {
        "grpc": {"port": live_port, "service": "down"},
        "initialDelaySeconds": 3,
        "periodSeconds": 1,
        "failureThreshold": 1,
        "timeoutSeconds": 5,
    }
    kube.create(
        process_pod(
            "grpc-down",
            agent.node_name,
            "",
            "Always",
            container={**_server(live_port), "livenessProbe": liveness},
        )
    )
    wait_for("Ready", lambda: condition(kube.get("pod", "grpc-ready"), "Ready") == "True")
    wait_for(
        "a restart",
        lambda: status_of(kube.get("pod", "grpc-down")).get("restartCount", 0) >= 1,
        timeout=60,
    )
    messages = [e["message"] for e in kube.events("grpc-down") if e["reason"] == "Unhealthy"]
    assert 'Liveness probe failed: service unhealthy (responded with "NOT_SERVING")' in messages
    assert condition(kube.get("pod", "grpc-ready"), "Ready") == "True"
