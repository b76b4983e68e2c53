"""Helpers and fixtures for the process backend's agent tests.

`start_process_agent` starts `python -m vkpy --provider=process` on a new node (with
the fast CrashLoopBackOff of `FAST`) and, at the end, stops it and kills the
containers it left running: vkpy leaves containers running when it stops, by design.
"""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.integration.agent import Agent, Kube
from tests.integration.conftest import StartAgent
from vkpy.providers.process import leftovers

FAST = {
    # Host programs on the host's network: what these tests are written for (as root,
    # the default is images through runc on a network per pod, modes.py).
    "runtime": "host",
    "network": "host",
    "backoff_base_seconds": 1,
    "backoff_max_seconds": 4,
}


def process_pod(
    name: str,
    node: str,
    script: str,
    restart_policy: str = "Never",
    container: dict[str, Any] | None = None,
    **spec: Any,
) -> dict[str, Any]:
    """A pod bound to `node` whose container runs `sh -c script`."""
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "labels": {"app": name}},
        "spec": {
            "nodeName": node,
            "restartPolicy": restart_policy,
            "terminationGracePeriodSeconds": 5,
            "containers": [
                {
                    "name": "app",
                    "image": "busybox:1.36",
                    "command": ["sh", "-c", script],
                    **(container or {}),
                }
            ],
            "tolerations": [{"operator": "Exists"}],
            **spec,
        },
    }


def status_of(pod: dict[str, Any] | None, name: str = "app", init: bool = False) -> dict[str, Any]:
    key = "initContainerStatuses" if init else "containerStatuses"
    for entry in (pod or {}).get("status", {}).get(key, []):
        if entry["name"] == name:
            return dict(entry)
    return {}


def condition(pod: dict[str, Any] | None, kind: str) -> str | None:
    for c in (pod or {}).get("status", {}).get("conditions", []):
        if c["type"] == kind:
            return str(c["status"])
    return None


def pod_dir(agent: Agent, kube: Kube, name: str, pods: Path | None = None) -> Path:
    pod = kube.get("pod", name)
    assert pod is not None
    return (pods or agent.state_dir / "process" / "pods") / pod["metadata"]["uid"]


def phase_is(kube: Kube, name: str, phase: str) -> dict[str, Any] | None:
    pod = kube.get("pod", name)
    return pod if pod and pod.get("status", {}).get("phase") == phase else None


def kill_containers(pods: Path) -> None:
    """End every container under `pods` (vkpy leaves them running when it stops)."""
    leftovers.end_pods(pods)


StartProcessAgent = Callable[..., Agent]


@pytest.fixture
def start_process_agent(start_agent: StartAgent) -> Iterator[StartProcessAgent]:
    """start_process_agent(config={...}, args=[...]): an agent with the process backend;
    at the end it is stopped and its containers are killed."""
    agents: list[tuple[Agent, Path]] = []

    def start(config: dict[str, Any] | None = None, args: list[str] | None = None) -> Agent:
        settings = {**FAST, **(config or {})}
        agent = start_agent(provider="process", config=settings, args=args)
        pods = Path(settings.get("pods_dir") or agent.state_dir / "process" / "pods")
        agents.append((agent, pods))
        return agent

    yield start
    for agent, pods in agents:
        agent.stop()
        kill_containers(pods)
        if not pods.is_relative_to(agent.state_dir):
            shutil.rmtree(pods, ignore_errors=True)


@pytest.fixture
def shared_dir() -> Iterator[Path]:
    """A directory the containers' unprivileged user may write (for hostPath)."""
    path = Path(tempfile.mkdtemp(prefix="vkpy-host-"))
    path.chmod(0o777)
    yield path
    shutil.rmtree(path, ignore_errors=True)


@pytest.fixture
def program_dir() -> Iterator[Path]:
    """A host directory for programs the containers run: not under /tmp, which is
    the pod's own with the pod filesystem (root); readable, not writable, by pods."""
    path = Path(tempfile.mkdtemp(prefix="vkpy-programs-", dir="/var/tmp"))
    path.chmod(0o755)
    yield path
    shutil.rmtree(path, ignore_errors=True)


@pytest.fixture
def reachable_pods_dir() -> Path:
    """A pods_dir whose ancestors the containers' user can traverse (pytest's are 0700),
    for programs that use absolute paths of their working directory."""
    path = Path(tempfile.mkdtemp(prefix="vkpy-pods-"))
    path.chmod(0o711)
    return path  # removed by start_process_agent, once its containers are gone
