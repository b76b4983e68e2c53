"""Termination messages on the process backend (issue 18), as the upstream "Container
Runtime blackbox" specs check them: a message the container writes to its
terminationMessagePath (default or custom, written by the containers' unprivileged
user), or with FallbackToLogsOnError the end of its log when it failed without one.

The process backend shows mount paths inside the container's root, so the scripts
write the path relative to their working directory (their root).
"""

# ruff: noqa: F811 - pytest fixtures are imported by name and then requested as arguments
from __future__ import annotations

from pathlib import Path
from typing import Any

from tests.integration.agent import Kube, wait_for
from tests.integration.process_fixtures import (  # noqa: F401 - fixtures
    StartProcessAgent,
    process_pod,
    start_process_agent,
    status_of,
)


def _terminated(kube: Kube, name: str) -> dict[str, Any] | None:
    state = status_of(kube.get("pod", name)).get("state") or {}
    return state.get("terminated")


def test_termination_messages_from_the_file_or_the_log(
    kube: Kube, start_process_agent: StartProcessAgent
) -> None:
    agent = start_process_agent()
    node = agent.node_name
    fallback = {"terminationMessagePolicy": "FallbackToLogsOnError"}
    cases = {
        "file": ("printf 'DONE as %s' $(id -u) > dev/termination-log; exit 1", {}),
        "custom": (
            "printf DONE > var/log/custom-message",
            {"terminationMessagePath": "/var/log/custom-message"},
        ),
        "from-log": ("echo starting; printf DONE; exit 3", fallback),
        "ok-log": ("printf OK", fallback),
        "ok-file": ("printf OK > dev/termination-log", fallback),
    }
    for name, (script, container) in cases.items():
        kube.create(process_pod(name, node, script, container=container))
    ended = {
        name: wait_for(f"{name} terminated", lambda n=name: _terminated(kube, n)) for name in cases
    }
    uid = ended["file"]["message"].removeprefix("DONE as ")
    assert ended["file"]["exitCode"] == 1
    assert uid.isdigit()
    assert ended["custom"]["message"] == "DONE"
    assert ended["from-log"]["message"] == "starting\nDONE"
    assert "message" not in ended["ok-log"]
    assert ended["ok-file"]["message"] == "OK"


def test_the_message_of_the_previous_run_stays_in_last_state(
    kube: Kube, start_process_agent: StartProcessAgent
) -> None:
    agent = start_process_agent()
    # The first run leaves a message and fails; the second keeps running.
    script = (
        "n=$(cat out/runs 2>/dev/null || echo 0); echo $((n+1)) > out/runs; "
        'printf "run $((n+1))" > dev/termination-log; [ "$n" -gt 0 ] && exec sleep 3600; exit 1'
    )
    kube.create(
        process_pod(
            "again",
            agent.node_name,
            script,
            "OnFailure",
            container={"volumeMounts": [{"name": "out", "mountPath": "/out"}]},
            volumes=[{"name": "out", "emptyDir": {}}],
        )
    )

    def restarted() -> dict[str, Any] | None:
        state = status_of(kube.get("pod", "again"))
        return state if "running" in state.get("state", {}) and state["restartCount"] else None

    state = wait_for("the second run", restarted, timeout=60)
    assert state["restartCount"] == 1
    assert state["lastState"]["terminated"]["message"] == "run 1"


def test_a_message_written_at_its_absolute_path_in_the_pods_own_root(
    kube: Kube, start_process_agent: StartProcessAgent
) -> None:
    """In the pod's own filesystem (vkpy as root), the message file is at
    terminationMessagePath itself, as in a container: `/dev/termination-log` (in the
    host's read-only /dev) and a custom path, written by the containers' user."""
    agent = start_process_agent()
    node = agent.node_name
    cases = {
        "abs-default": ("printf 'DONE as %s' $(id -u) > /dev/termination-log; exit 1", {}),
        "abs-custom": (
            "printf CUSTOM > /var/lib/message/here",
            {"terminationMessagePath": "/var/lib/message/here"},
        ),
    }
    for name, (script, container) in cases.items():
        kube.create(process_pod(name, node, script, container=container))
    ended = {
        name: wait_for(f"{name} terminated", lambda n=name: _terminated(kube, n)) for name in cases
    }
    assert ended["abs-default"]["exitCode"] == 1
    assert ended["abs-default"]["message"].removeprefix("DONE as ").isdigit()
    assert ended["abs-custom"]["exitCode"] == 0
    assert ended["abs-custom"]["message"] == "CUSTOM"
    assert not Path("/dev/termination-log").exists()  # the host's /dev untouched
    assert not Path("/var/lib/message").exists()
