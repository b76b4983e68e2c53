"""An ephemeral container added through the API, as the upstream spec "Ephemeral
Containers should will start an ephemeral container in an existing pod" does it (no
target container, stdin and tty set): it runs, `exec` reaches it and its logs are
served (issue 18)."""

# ruff: noqa: F811 - pytest fixtures are imported by name and then requested as arguments
from __future__ import annotations

import json
from typing import Any

from tests.integration.agent import Kube, wait_for
from tests.integration.process_fixtures import (  # noqa: F401 - fixtures
    StartProcessAgent,
    phase_is,
    process_pod,
    start_process_agent,
)


def _ephemeral_state(kube: Kube, pod: str, name: str) -> dict[str, object]:
    for status in (kube.get("pod", pod) or {}).get("status", {}).get(
        "ephemeralContainerStatuses"
    ) or []:
        if status["name"] == name:
            return dict(status.get("state") or {})
    return {}


def add_debugger(kube: Kube, pod: dict[str, Any], image: str) -> None:
    """The spec's ephemeral container `debugger` (stdin, tty, no target), added to
    `pod` (as read) through its ephemeralcontainers subresource."""
    pod["spec"]["ephemeralContainers"] = [
        {
            "name": "debugger",
            "image": image,
            "command": ["/bin/sh", "-c", "while true; do echo polo; sleep 2; done"],
            "stdin": True,
            "tty": True,
        }
    ]
    name = pod["metadata"]["name"]
    path = f"/api/v1/namespaces/{kube.namespace}/pods/{name}/ephemeralcontainers"
    kube.kubectl("replace", "--raw", path, "-f", "-", input=json.dumps(pod))


def test_an_ephemeral_container_added_through_the_api_runs(
    kube: Kube, start_process_agent: StartProcessAgent
) -> None:
    agent = start_process_agent()
    kube.create(process_pod("target", agent.node_name, "sleep 10000", "Always"))
    pod = wait_for("Running", lambda: phase_is(kube, "target", "Running"))
    add_debugger(kube, pod, "busybox:1.36")
    wait_for("debugger running", lambda: "running" in _ephemeral_state(kube, "target", "debugger"))
    out = kube.kubectl(
        "exec", "-n", kube.namespace, "target", "-c", "debugger", "--", "echo", "marco"
    )
    assert "marco" in out
    wait_for(
        "polo in the logs",
        lambda: "polo" in kube.kubectl("logs", "-n", kube.namespace, "target", "-c", "debugger"),
    )
