"""gRPC probes on the process backend (issue 18), against a real gRPC health server
(grpcio's, run by the test on the pods' address, as pods share the host's network):
a readiness probe on a SERVING server makes the pod Ready, a liveness probe on a
NOT_SERVING service restarts the container with the kubelet's Unhealthy message."""

# ruff: noqa: F811 - pytest fixtures are imported by name and then requested as arguments
from __future__ import annotations

from collections.abc import Iterator
from concurrent import futures

import grpc
import pytest
from grpc_health.v1 import health, health_pb2, health_pb2_grpc

from tests.integration.agent import Kube, wait_for
from tests.integration.process_fixtures import (  # noqa: F401 - fixtures
    StartProcessAgent,
    condition,
    process_pod,
    start_process_agent,
    status_of,
)


@pytest.fixture
def health_port() -> Iterator[int]:
    servicer = health.HealthServicer()
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=2))
    health_pb2_grpc.add_HealthServicer_to_server(servicer, server)
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    servicer.set("", health_pb2.HealthCheckResponse.SERVING)
    servicer.set("down", health_pb2.HealthCheckResponse.NOT_SERVING)
    yield port
    server.stop(None)


def test_grpc_readiness_and_liveness_probes(
    kube: Kube, start_process_agent: StartProcessAgent, health_port: int
) -> None:
    agent = start_process_agent()
    readiness = {"grpc": {"port": health_port}, "periodSeconds": 1}
    kube.create(
        process_pod(
            "grpc-ready",
            agent.node_name,
            "sleep 3600",
            "Always",
            container={"readinessProbe": readiness},
        )
    )
    liveness = {
        "grpc": {"port": health_port, "service": "down"},
        "periodSeconds": 1,
        "failureThreshold": 1,
    }
    kube.create(
        process_pod(
            "grpc-down",
            agent.node_name,
            "sleep 3600",
            "Always",
            container={"livenessProbe": liveness},
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
