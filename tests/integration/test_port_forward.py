"""`kubectl port-forward` through the real API server to a server in the pod.

On the process backend the pod runs `python3 -m http.server`; HTTP GETs go through
the forwarded local port, several at once, over the default path (kubectl tunnels
SPDY in a WebSocket to the API server, which speaks SPDY to the kubelet) and with
KUBECTL_PORT_FORWARD_WEBSOCKETS=false. A port nothing listens on is reported, and a
stopped port-forward leaves the agent holding nothing. The sim backend's toy HTTP
answer is checked the same way.
"""

# ruff: noqa: F811 - pytest fixtures are imported by name and then requested as arguments
from __future__ import annotations

import socket
import subprocess
import urllib.request
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager

import pytest

from tests.integration.agent import free_port, wait_for
from tests.integration.stream_fixtures import Box, process_box, sim_box  # noqa: F401
from tests.integration.stream_helpers import TRANSPORTS, start_kubectl
from vkpy.devcluster import ClusterAccess


@contextmanager
def port_forward(
    cluster: ClusterAccess, namespace: str, pod: str, remote: int, transport: str
) -> Iterator[tuple[int, subprocess.Popen[bytes]]]:
    local = free_port()
    client = start_kubectl(
        cluster,
        "port-forward",
        "-n",
        namespace,
        f"pod/{pod}",
        f"{local}:{remote}",
        "--address=127.0.0.1",
        transport=transport,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    try:
        assert client.stdout is not None
        line = client.stdout.readline().decode()
        assert line.startswith("Forwarding from 127.0.0.1:"), line
        yield local, client
    finally:
        client.terminate()
        client.wait(timeout=10)


def get(port: int, path: str) -> tuple[int, bytes]:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=30) as response:
        return response.status, response.read()


@pytest.mark.parametrize("transport", TRANSPORTS)
def test_port_forward_to_an_http_server(
    cluster: ClusterAccess, process_box: Box, namespace: str, transport: str
) -> None:
    before = process_box.footprint()
    with port_forward(cluster, namespace, "box", process_box.http_port, transport) as (local, _):
        status, body = get(local, "/")
        assert status == 200
        assert b"Directory listing for /" in body
        with ThreadPoolExecutor(8) as pool:
            results = list(pool.map(lambda i: get(local, f"/?n={i}"), range(16)))
        assert {status for status, _ in results} == {200}
        assert all(b"Directory listing for /" in body for _, body in results)
    process_box.assert_released(before)


@pytest.mark.parametrize("transport", TRANSPORTS)
def test_port_forward_to_a_closed_port_is_reported(
    cluster: ClusterAccess, process_box: Box, namespace: str, transport: str
) -> None:
    closed = free_port()
    with port_forward(cluster, namespace, "box", closed, transport) as (local, client):
        with pytest.raises(OSError):
            get(local, "/")
        assert client.stderr is not None
        wait_for("kubectl to report the error", lambda: client.poll() is not None, timeout=30)
        err = client.stderr.read().decode()
    assert f"error forwarding port {closed} to pod box_{namespace}" in err
    assert "connection refused" in err


def test_port_forward_never_reaches_a_host_service(
    cluster: ClusterAccess, process_box: Box, namespace: str
) -> None:
    """Issue 12, finding 3: the pod shares the host's network, but port-forward reaches
    only what a process of the pod listens on, not a loopback-only service of the host."""
    with socket.socket() as host_service:
        host_service.bind(("127.0.0.1", 0))
        host_service.listen()
        host_service.setblocking(False)
        port = host_service.getsockname()[1]
        with port_forward(cluster, namespace, "box", port, TRANSPORTS[0]) as (local, client):
            with pytest.raises(OSError):
                get(local, "/")
            wait_for("kubectl to report the error", lambda: client.poll() is not None, timeout=30)
            assert client.stderr is not None
            assert "connection refused" in client.stderr.read().decode()
        with pytest.raises(BlockingIOError):
            host_service.accept()  # nobody ever connected to it


@pytest.mark.parametrize("transport", TRANSPORTS)
def test_port_forward_on_sim(
    cluster: ClusterAccess, sim_box: Box, namespace: str, transport: str
) -> None:
    with port_forward(cluster, namespace, "box", 8080, transport) as (local, _):
        with ThreadPoolExecutor(4) as pool:
            results = list(pool.map(lambda i: get(local, f"/conn{i}"), range(4)))
    assert results == [
        (200, f"sim pod {namespace}/box port 8080 path /conn{i}\n".encode()) for i in range(4)
    ]
