"""What the `runtime: oci` integration tests share: the root-only mark, a real
registry serving busybox and the pause image, the node's oci settings, a busybox pod,
and reading a container's runc state and host ids."""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.integration.agent import Agent, Kube
from tests.registry import Registry, busybox_layout

ROOT_ONLY = pytest.mark.skipif(
    os.geteuid() != 0, reason="runtime: oci makes user namespaces and cgroups as root only"
)


@contextlib.contextmanager
def busybox_registry(directory: Path) -> Iterator[Registry]:
    """A real registry (in the caller's network namespace) serving busybox as
    library/busybox:latest and the sandboxes' pause image; stopped afterwards."""
    running = Registry(directory).start()
    running.push(busybox_layout(), "library/busybox:latest")
    running.serve_pause()
    try:
        yield running
    finally:
        running.stop()


@pytest.fixture(scope="module")
def registry(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Registry]:
    with busybox_registry(tmp_path_factory.mktemp("registry")) as running:
        yield running


def oci_config(
    registry: Registry, pods_dir: Path, sandbox: Registry | None = None
) -> dict[str, Any]:
    """`sandbox`: the registry that serves the pause image (`registry` by default)."""
    pause = sandbox or registry
    return {
        "runtime": "oci",
        "network": "host",  # as written: the pods share the node's network
        "pods_dir": str(pods_dir),
        # The sandbox's image, registry.k8s.io/pause:3.10, through the mirror.
        "registries": {
            registry.host: {"insecure": True},
            pause.host: {"insecure": True},
            "registry.k8s.io": {"mirrors": [f"http://{pause.host}"]},
        },
    }


def busybox_pod(name: str, node: str, image: str, **container: object) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name},
        "spec": {
            "nodeName": node,
            "restartPolicy": "Never",
            "terminationGracePeriodSeconds": 2,
            "containers": [{"name": "app", "image": image, **container}],
            "tolerations": [{"operator": "Exists"}],
        },
    }


def kubectl(kube: Kube, *args: str) -> str:
    return kube.kubectl("-n", kube.namespace, *args)


def logs(kube: Kube, name: str) -> str:
    """`kubectl logs`, "" while the pod's node cannot answer yet."""
    return kube.cluster.run_kubectl("-n", kube.namespace, "logs", name, check=False).stdout


def runc_root(agent: Agent) -> Path:
    return agent.state_dir / "process" / "oci" / "runc"


def runc_ids(agent: Agent) -> list[str]:
    out = subprocess.run(
        ["runc", "--root", str(runc_root(agent)), "list", "--format", "json"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    return [item["id"] for item in json.loads(out or "null") or []]


def container_pid(agent: Agent, container_id: str) -> int:
    out = subprocess.run(
        ["runc", "--root", str(runc_root(agent)), "state", container_id],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    return int(json.loads(out)["pid"])


def host_uid(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("Uid:"):
            return int(line.split()[1])
    raise AssertionError("no Uid line")
