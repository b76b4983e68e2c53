"""`make run` runs real images: its virtual node (vkpy as root: `runtime: oci` on a
network per pod by default) pulls examples/hello.yaml's busybox and the
getting-started `serverless-nginx` (examples/nginx.yaml, `nginx:alpine`) from the dev
cluster's registry and runs them through runc, checked as a user checks them:
`kubectl logs`, Ready with no restarts, and nginx's own `Server:` header through
`kubectl port-forward`.

The dev cluster is started by the command `make run` runs (`python -m
vkpy.devcluster run`), inside a network namespace this test makes
(vkpy.devcluster.netns), so the pods' veth pairs and routes never touch the host's
network. metrics-server is left out (`--no-metrics-server`): `kubectl top` is
test_controlplane.py's.
"""

from __future__ import annotations

import ipaddress
import json
import os
import re
import signal
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.integration.agent import free_port, wait_for
from vkpy.devcluster import ClusterAccess, DevCluster, pod_network
from vkpy.devcluster.netns import PrivateNetwork
from vkpy.devcluster.nodes import RUN_PODS_ROOT
from vkpy.providers.process.modes import DEFAULT_POD_CIDRS

REPO = Path(__file__).resolve().parents[2]
NODE = "vkpy-dev"
pytestmark = [
    pytest.mark.cluster,
    pytest.mark.timeout(900),
    pytest.mark.skipif(
        os.geteuid() != 0, reason="images run through runc (and this test's netns) need root"
    ),
]


def devcluster(*args: str) -> list[str]:
    return [sys.executable, "-m", "vkpy.devcluster", *args]


@pytest.fixture
def make_run(tmp_path: Path) -> Iterator[tuple[ClusterAccess, Path]]:
    """`python -m vkpy.devcluster run` in a network namespace of the test's own, until
    its virtual node is Ready and examples/hello.yaml applied; then SIGTERM (as a
    terminal closing) and `down`."""
    directory = tmp_path / "cluster"
    out = tmp_path / "run.out"
    env = {k: v for k, v in os.environ.items() if k != "KUBECONFIG"}
    pods: Path | None = None
    with PrivateNetwork(), out.open("w") as sink:
        began = time.monotonic()
        run = subprocess.Popen(
            devcluster("run", "--dir", str(directory), "--no-metrics-server"),
            stdout=sink, stderr=subprocess.STDOUT, cwd=REPO, env=env,
        )  # fmt: skip
        try:
            wait_for(
                "make run's virtual node Ready with examples/hello.yaml applied",
                lambda: (
                    f"Node {NODE} is Ready and examples/hello.yaml is applied" in out.read_text()
                    or run.poll() is not None
                ),
                timeout=600,
                interval=1,
            )
            assert run.poll() is None, out.read_text()
            print(f"\nmake run: node Ready, hello applied in {time.monotonic() - began:.1f} s")
            # pytest's directories are 0700: the pods live where their ids can reach them.
            link = directory / "nodes" / NODE / "state" / "process" / "pods"
            pods = link.resolve()
            assert link.is_symlink() and pods.parent.parent == RUN_PODS_ROOT, pods
            yield DevCluster(directory).access(), out
        finally:
            if run.poll() is None:
                run.send_signal(signal.SIGTERM)
                try:
                    run.wait(timeout=60)
                except subprocess.TimeoutExpired:
                    run.kill()
                    run.wait()
            down = subprocess.run(
                devcluster("down", "--purge", "--dir", str(directory)),
                cwd=REPO, env=env, capture_output=True, text=True, timeout=300, check=False,
            )  # fmt: skip
            print(out.read_text()[-20000:])
    assert down.returncode == 0, down.stderr
    assert pods is not None and not pods.parent.exists(), "down --purge left the pods behind"


def get(access: ClusterAccess, kind: str, name: str) -> dict[str, Any]:
    found: dict[str, Any] = json.loads(access.run_kubectl("get", kind, name, "-o", "json").stdout)
    return found


def ready(access: ClusterAccess, name: str) -> dict[str, Any] | None:
    pod = get(access, "pod", name)
    conditions = pod.get("status", {}).get("conditions", [])
    if any(c["type"] == "Ready" and c["status"] == "True" for c in conditions):
        return pod
    return None


def port_forward_get(access: ClusterAccess, pod: str, port: int) -> tuple[str, str]:
    """GET / through `kubectl port-forward pod/<pod> LOCAL:<port>`: (Server header, body)."""
    local = free_port()
    client = subprocess.Popen(
        access.kubectl_argv("port-forward", f"pod/{pod}", f"{local}:{port}",
                            "--address=127.0.0.1"),
        stdout=subprocess.PIPE, stderr=subprocess.PIPE,
    )  # fmt: skip
    try:
        assert client.stdout is not None
        line = client.stdout.readline().decode()
        assert line.startswith("Forwarding from 127.0.0.1:"), line
        with urllib.request.urlopen(f"http://127.0.0.1:{local}/", timeout=20) as response:
            return str(response.headers.get("Server", "")), response.read().decode()
    finally:
        client.terminate()
        client.wait(timeout=10)


def test_make_run_serves_hello_and_the_getting_started_nginx_from_real_images(
    make_run: tuple[ClusterAccess, Path],
) -> None:
    access, _ = make_run
    # The node says it runs images on a network per pod.
    labels = get(access, "node", NODE)["metadata"]["labels"]
    assert labels["vkpy.io/runtime"] == "oci"
    assert labels["vkpy.io/network"] == "pod"
    began = time.monotonic()
    access.run_kubectl("apply", "-f", str(REPO / "examples" / "nginx.yaml"))

    # hello: busybox's own sh (the image's, pulled from the registry) prints its lines.
    logs = wait_for(
        "hello's logs",
        lambda: access.run_kubectl("logs", "hello", check=False).stdout,
        timeout=180,
        interval=1,
    )
    assert "hello from hello" in logs
    hello = get(access, "pod", "hello")
    status = hello["status"]["containerStatuses"][0]
    assert re.search(r"busybox@sha256:[0-9a-f]{64}$", status["imageID"]), status["imageID"]
    # The pod reaches the API server at the `kubernetes` Service variables it is given
    # (in its own network 127.0.0.1 is the pod itself): plain text sent there is
    # answered by the API server's TLS listener itself.
    reach = access.run_kubectl(
        "exec", "hello", "--", "sh", "-c",
        'echo "$KUBERNETES_SERVICE_HOST"; '
        '(printf "GET / HTTP/1.0\\r\\n\\r\\n"; sleep 3) | '
        'nc -w 5 "$KUBERNETES_SERVICE_HOST" "$KUBERNETES_SERVICE_PORT"',
        check=False,
    )  # fmt: skip
    assert reach.stdout.splitlines()[0] == pod_network.API_ADDRESS, reach
    assert "Client sent an HTTP request to an HTTPS server" in reach.stdout, reach

    # serverless-nginx: Running and Ready, never restarted, at an address of its own.
    nginx = wait_for("serverless-nginx Ready", lambda: ready(access, "serverless-nginx"), 300, 1)
    took = time.monotonic() - began
    assert nginx["status"]["phase"] == "Running"
    (status,) = nginx["status"]["containerStatuses"]
    assert status["ready"] is True and status["restartCount"] == 0, status
    assert "running" in status["state"], status
    assert re.search(r"nginx@sha256:[0-9a-f]{64}$", status["imageID"]), status["imageID"]
    pod_ip = ipaddress.ip_address(nginx["status"]["podIP"])
    assert pod_ip in DEFAULT_POD_CIDRS, pod_ip  # the node's own /24, not the host's address

    # Real nginx answers through kubectl port-forward (inside the pod's network namespace).
    server, body = port_forward_get(access, "serverless-nginx", 80)
    assert server.startswith("nginx/"), server
    assert "<title>Welcome to nginx!</title>" in body
    # ... and logs the request on its stdout, as the image links its access log there.
    access_log = wait_for(
        "nginx's access log line",
        lambda: "GET / HTTP/1.1" in access.run_kubectl("logs", "serverless-nginx").stdout,
        timeout=30,
    )
    assert access_log
    again = get(access, "pod", "serverless-nginx")["status"]["containerStatuses"][0]
    assert again["restartCount"] == 0 and again["ready"] is True, again
    print(f"\nserverless-nginx: apply -> Ready {took:.1f} s (first pull included)")
