"""`kubectl debug` with an ephemeral container, through the real API server.

On the process backend the debug container runs in its target's context (here the
`app` container of `process_box`, whose environment holds GREETING), `kubectl debug
-i` attaches to it, and its status is written. On the sim backend, which cannot run
ephemeral containers, the container is reported terminated with a reason and a
Warning Event says why, so kubectl ends instead of waiting forever.
"""

# ruff: noqa: F811 - pytest fixtures are imported by name and then requested as arguments
from __future__ import annotations

import subprocess
import threading
from typing import Any

from tests.integration.agent import Kube, wait_for
from tests.integration.stream_fixtures import Box, process_box, sim_box  # noqa: F401
from tests.integration.stream_helpers import kubectl, start_kubectl
from vkpy.devcluster import ClusterAccess


def ephemeral_status(kube: Kube, pod: str, name: str) -> dict[str, Any]:
    for status in (kube.get("pod", pod) or {}).get("status", {}).get(
        "ephemeralContainerStatuses"
    ) or []:
        if status["name"] == name:
            return dict(status)
    return {}


def test_kubectl_debug_runs_in_the_target_container(
    cluster: ClusterAccess, kube: Kube, process_box: Box, namespace: str
) -> None:
    script = 'read -r line; echo "got $line with $GREETING"'
    client = start_kubectl(
        cluster,
        *("debug", "-i", "-n", namespace, "box", "--image=busybox"),
        *("--target=app", "--container=dbg", "--", "sh", "-c", script),
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    assert client.stdin is not None and client.stdout is not None
    # The debug container has stdin without stdinOnce: as on a kubelet, the end of the
    # client's stdin would end the session, so stdin stays open until the answer came.
    timer = threading.Timer(90, client.kill)
    timer.start()
    try:
        client.stdin.write(b"typed\n")
        client.stdin.flush()
        answer = b""
        while line := client.stdout.readline():  # kubectl first says which container
            if line.startswith(b"got "):
                answer = line
                break
        client.stdin.close()
        client.wait()
    finally:
        timer.cancel()
        client.kill()
    assert answer == b"got typed with hello from the pod\n", (answer, client.stderr.read())
    assert client.returncode == 0
    terminated = wait_for(
        "the debug container to end",
        lambda: ephemeral_status(kube, "box", "dbg").get("state", {}).get("terminated"),
    )
    assert terminated["exitCode"] == 0
    logs = kube.kubectl("logs", "-n", namespace, "box", "-c", "dbg")
    assert logs == "got typed with hello from the pod\n"


def test_kubectl_debug_on_a_backend_that_cannot_run_it_ends_with_a_reason(
    cluster: ClusterAccess, kube: Kube, sim_box: Box, namespace: str
) -> None:
    got = kubectl(
        cluster,
        *("debug", "-i", "-n", namespace, "box", "--image=busybox"),
        *("--target=app", "--container=dbg", "--", "echo", "hi"),
        timeout=90,
    )
    # kubectl saw the container terminated and, as it does then, asked for its logs.
    assert got.returncode != 0
    assert b'container "dbg" in pod "box" is not available' in got.stderr, got.stderr
    status = ephemeral_status(kube, "box", "dbg")
    terminated = status["state"]["terminated"]
    assert terminated["reason"] == "ContainerCannotRun"
    assert terminated["message"] == "the sim backend cannot run ephemeral containers"
    event = wait_for(
        "a Failed Event",
        lambda: next(
            (e for e in kube.events("box") if e["reason"] == "Failed" and e["type"] == "Warning"),
            None,
        ),
    )
    assert event["message"] == "Error: the sim backend cannot run ephemeral containers"
    assert event["involvedObject"]["fieldPath"] == "spec.ephemeralContainers{dbg}"
