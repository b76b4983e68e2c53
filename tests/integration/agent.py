"""Running vkpy itself in tests: `python -m vkpy` as a real process, and kubectl waits.

Agent tests must see what a user sees, so the agent runs as the command people run,
against the real control plane, and the tests read the results back through kubectl.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from vkpy.devcluster import ClusterAccess

Pod = dict[str, Any]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass
class Agent:
    """One `python -m vkpy` process and what it needs to be started again."""

    cluster: ClusterAccess
    node_name: str
    state_dir: Path
    log_path: Path
    provider: str = "sim"
    provider_config: Path | None = None
    extra_args: list[str] = field(default_factory=list)
    port: int = field(default_factory=free_port)
    process: subprocess.Popen[bytes] | None = None
    kubeconfig_env: str | None = None
    """When set: no --kubeconfig and no --node-ip; KUBECONFIG is this (a path list)."""

    def argv(self) -> list[str]:
        where = (
            []
            if self.kubeconfig_env is not None
            else [f"--kubeconfig={self.cluster.kubeconfig}", "--node-ip=127.0.0.1"]
        )
        argv = [
            sys.executable,
            "-m",
            "vkpy",
            *where,
            f"--node-name={self.node_name}",
            f"--provider={self.provider}",
            f"--port={self.port}",
            "--listen-address=127.0.0.1",
            f"--state-dir={self.state_dir}",
            "--node-lease-duration=8",
            "--log-level=debug",
            *self.extra_args,
        ]
        if self.provider_config is not None:
            argv.append(f"--provider-config={self.provider_config}")
        return argv

    def start(self) -> Agent:
        log = self.log_path.open("ab")
        env = None
        if self.kubeconfig_env is not None:
            env = {**environ_without_kube(), "KUBECONFIG": self.kubeconfig_env}
        self.process = subprocess.Popen(
            self.argv(), stdout=log, stderr=log, start_new_session=True, env=env
        )
        return self

    def signal(self, sig: int) -> int:
        assert self.process is not None
        self.process.send_signal(sig)
        return self.process.wait(timeout=30)

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.signal(signal.SIGTERM)

    def kill(self) -> None:
        self.signal(signal.SIGKILL)

    def alive(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def logs(self) -> str:
        return self.log_path.read_text(errors="replace")


def wait_for(
    what: str, probe: Callable[[], Any], timeout: float = 60.0, interval: float = 0.25
) -> Any:
    """Call `probe` until it returns something truthy; fail with `what` after `timeout`."""
    deadline = time.monotonic() + timeout
    last: Any = None
    while time.monotonic() < deadline:
        last = probe()
        if last:
            return last
        time.sleep(interval)
    raise AssertionError(f"timed out after {timeout}s waiting for {what}; last: {last!r}")


class Kube:
    """kubectl-based reads and writes for assertions (JSON in, JSON out)."""

    def __init__(self, cluster: ClusterAccess, namespace: str = "default") -> None:
        self.cluster = cluster
        self.namespace = namespace

    def kubectl(self, *args: str, input: str | None = None, check: bool = True) -> str:
        return self.cluster.run_kubectl(*args, input=input, check=check).stdout

    def get(self, kind: str, name: str, namespaced: bool = True) -> Pod | None:
        args = ["get", kind, name, "-o", "json", "--ignore-not-found"]
        if namespaced:
            args += ["-n", self.namespace]
        out = self.kubectl(*args)
        return json.loads(out) if out.strip() else None

    def list(self, kind: str, selector: str = "") -> list[Pod]:
        args = ["get", kind, "-n", self.namespace, "-o", "json"]
        if selector:
            args += ["-l", selector]
        items: list[Pod] = json.loads(self.kubectl(*args))["items"]
        return items

    def apply(self, manifest: dict[str, Any]) -> None:
        self.kubectl("apply", "-n", self.namespace, "-f", "-", input=json.dumps(manifest))

    def create(self, manifest: dict[str, Any]) -> Pod:
        out = self.kubectl(
            "create", "-n", self.namespace, "-o", "json", "-f", "-", input=json.dumps(manifest)
        )
        created: Pod = json.loads(out)
        return created

    def events(self, name: str) -> list[Pod]:
        out = self.kubectl(
            "get",
            "events",
            "-n",
            self.namespace,
            "-o",
            "json",
            "--field-selector",
            f"involvedObject.name={name}",
        )
        items: list[Pod] = json.loads(out)["items"]
        return items

    def phase(self, name: str) -> str | None:
        pod = self.get("pod", name)
        return None if pod is None else pod.get("status", {}).get("phase")

    def log_tail(self, name: str) -> str:
        """`kubectl logs --tail=1` of a pod, which the API server fetches from the
        kubelet API the pod's Node points at; asserts that it answered."""
        result = self.cluster.run_kubectl(
            "logs", "-n", self.namespace, name, "--tail=1", check=False
        )
        assert result.returncode == 0, result.stderr
        return result.stdout


def pod_identity(pod: Pod) -> tuple[Any, ...]:
    """What must not change about a pod while the vkpy serving its node rolls, fails
    over or hands the node to another replica: UID, node, phase, container ID,
    restart count and start time (the first container's)."""
    status = pod.get("status") or {}
    container = (status.get("containerStatuses") or [{}])[0]
    return (
        (pod.get("metadata") or {}).get("uid"),
        (pod.get("spec") or {}).get("nodeName"),
        status.get("phase"),
        container.get("containerID"),
        container.get("restartCount"),
        (container.get("state") or {}).get("running", {}).get("startedAt"),
    )


def sim_pod(
    name: str,
    node: str,
    annotations: dict[str, str] | None = None,
    restart_policy: str = "Never",
    containers: list[dict[str, Any]] | None = None,
    **spec: Any,
) -> dict[str, Any]:
    """A pod bound straight to `node` (nodeName set), as the sim backend runs it."""
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "annotations": annotations or {}},
        "spec": {
            "nodeName": node,
            "restartPolicy": restart_policy,
            "containers": containers or [{"name": "app", "image": "example.com/app:1"}],
            "tolerations": [{"operator": "Exists"}],
            **spec,
        },
    }


def environ_without_kube() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if k not in ("KUBECONFIG",)}
