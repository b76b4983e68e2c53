"""The dev cluster's nodes: a regular pool of workers, and virtual nodes beside it.

Hybrid scheduling (a regular pool for the steady load, virtual nodes for bursts,
batch and GPU work) can only be shown with both kinds of node. Here both are vkpy
processes: a *worker* stands in for a regular kubelet node (process backend, no
taint, modest capacity, `node.kubernetes.io/pool=regular`, a zone, its `type` label
not `virtual-kubelet`), a *virtual* node is what vkpy is for (tainted, `type=virtual-kubelet`,
large capacity). Each gets its own port, state directory, log, and a serving
certificate from the kubelet signing CA, so metrics-server can verify it.

This module holds what a node is (as plain data, so the command lines can be read
and tested) and the pod clean-up `down` needs: the process backend's containers
outlive vkpy on purpose, so stopping a node also stops what it still runs.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import sys
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

import yaml

from .cluster_pki import LOOPBACK_IPS, ClusterPKI
from .components import LOOPBACK
from .pki import CertificateAuthority, CertPaths, write_pem
from .processes import start_ticks

POOL_LABEL = "node.kubernetes.io/pool"
GPU = "nvidia.com/gpu"
ZONE_LABEL = "topology.kubernetes.io/zone"
#: A regular worker's capacity: small, so a burst overflows it quickly.
WORKER_CAPACITY: Mapping[str, str] = {"cpu": "2", "memory": "4Gi", "pods": "10"}
#: The virtual node's advertised capacity (a cloud's, not this host's).
VIRTUAL_CAPACITY: Mapping[str, str] = {"cpu": "100", "memory": "400Gi", "pods": "500"}
#: hostPath volumes the dev cluster's nodes accept (the examples share files there).
#: A fixed path, so examples/hybrid/ can name it; symbolic links out of it are refused.
SHARED_HOST_PATH = "/var/tmp/vkpy-hybrid"  # noqa: S108


@dataclass(frozen=True)
class NodeSpec:
    """One vkpy node the dev cluster runs."""

    name: str
    provider: str
    labels: Mapping[str, str] = field(default_factory=dict)
    #: `key[=value]:Effect` each; empty means no taint at all.
    taints: tuple[str, ...] = ()
    #: The backend's settings (its --provider-config).
    provider_config: Mapping[str, object] = field(default_factory=dict)
    #: Further vkpy flags.
    extra_args: tuple[str, ...] = ()

    def argv(self, directory: Path, kubeconfig: Path, port: int) -> list[str]:
        """`python -m vkpy ...` for this node, its files under `directory`."""
        cert = serving_cert(directory)
        argv = [
            sys.executable,
            "-m",
            "vkpy",
            f"--kubeconfig={kubeconfig}",
            f"--node-name={self.name}",
            f"--provider={self.provider}",
            f"--provider-config={directory / 'provider.yaml'}",
            f"--state-dir={directory / 'state'}",
            f"--node-ip={LOOPBACK}",
            f"--listen-address={LOOPBACK}",
            f"--port={port}",
            f"--tls-cert-file={cert.cert}",
            f"--tls-private-key-file={cert.key}",
            "--node-lease-duration=12",
        ]
        argv += [f"--label={k}={v}" for k, v in self.labels.items()]
        argv += [f"--taint={t}" for t in self.taints] or ["--taint=none"]
        return argv + list(self.extra_args)


def worker(index: int, gpus: int = 0) -> NodeSpec:
    """Regular worker `vkpy-worker-<index>`: process backend, untainted, 2 CPU/4Gi/10 pods."""
    capacity = dict(WORKER_CAPACITY)
    labels = {
        POOL_LABEL: "regular",
        "type": "regular",
        "kubernetes.io/role": "worker",
        # Zones round-robin, as a pool spread over three zones would be; the virtual
        # nodes have none, so topology spread over zones never counts them.
        ZONE_LABEL: f"local-{'abc'[(index - 1) % 3]}",
    }
    if gpus:
        capacity[GPU] = str(gpus)
        labels["accelerator"] = "nvidia"
    return NodeSpec(
        name=f"vkpy-worker-{index}",
        provider="process",
        labels=labels,
        provider_config={"capacity": capacity, "host_path_prefixes": [SHARED_HOST_PATH]},
    )


def virtual(pod_deletion_cost: int | None = None) -> NodeSpec:
    """The virtual node `vkpy-virtual`: process backend, tainted, the host's capacity."""
    extra = () if pod_deletion_cost is None else (f"--pod-deletion-cost={pod_deletion_cost}",)
    return NodeSpec(
        name="vkpy-virtual",
        provider="process",
        labels={POOL_LABEL: "virtual"},
        taints=("virtual-kubelet.io/provider=process:NoSchedule",),
        # Stands in for a cloud's capacity: far more than a worker, whatever the host.
        provider_config={
            "capacity": dict(VIRTUAL_CAPACITY),
            "host_path_prefixes": [SHARED_HOST_PATH],
        },
        extra_args=extra,
    )


def gpu_virtual(gpus: int = 8) -> NodeSpec:
    """`vkpy-gpu`: a simulated GPU-capable virtual node (what ACI GPU would be)."""
    return NodeSpec(
        name="vkpy-gpu",
        provider="sim",
        labels={POOL_LABEL: "virtual", "accelerator": "nvidia"},
        taints=("virtual-kubelet.io/provider=sim:NoSchedule",),
        provider_config={"start_seconds": 1.0, "capacity": {GPU: str(gpus)}},
    )


def serving_cert(directory: Path) -> CertPaths:
    return CertPaths(directory / "serving.crt", directory / "serving.key")


def prepare(spec: NodeSpec, directory: Path, pki: ClusterPKI) -> None:
    """Write the node's provider config and its kubelet-serving certificate."""
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "provider.yaml").write_text(yaml.safe_dump(dict(spec.provider_config)))
    issue_serving_cert(spec.name, directory, pki)


def issue_serving_cert(node: str, directory: Path, pki: ClusterPKI) -> CertPaths:
    """The node's serving certificate from the kubelet signing CA (kept once made), as
    a kubelet-serving CSR would give it: what metrics-server and a verifying API
    server trust."""
    cert = serving_cert(directory)
    if cert.cert.exists() and cert.key.exists():
        return cert
    ca = CertificateAuthority.load(pki.kubelet_ca.cert, pki.kubelet_ca.key)
    cert_pem, key_pem = ca.issue(
        f"system:node:{node}",
        organizations=("system:nodes",),
        dns_names=(node, "localhost"),
        ip_addresses=LOOPBACK_IPS,
        server=True,
    )
    write_pem(cert.cert, cert_pem)
    write_pem(cert.key, key_pem, secret=True)
    return cert


def _same(pid: int, ticks: int) -> bool:
    return pid > 0 and start_ticks(pid) == ticks


def kill_leftover_pods(state_dir: Path) -> int:
    """Kill the process backend's containers still running under `state_dir`.

    Used after the node's pods were deleted through the API (which is how they are
    normally stopped) for whatever did not go: each supervisor and its container's
    process group, only while PID and start time still match. Returns how many
    containers were killed.
    """
    killed = 0
    for run in (state_dir / "process" / "pods").glob("*/containers/*/instances/*/run.json"):
        if (run.parent / "exit.json").exists():
            continue
        try:
            record = json.loads(run.read_text())
        except (OSError, ValueError):
            continue
        supervisor, container = record.get("supervisor_pid", 0), record.get("pid", 0)
        alive = False
        if _same(supervisor, record.get("supervisor_start", -1)):
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(supervisor, signal.SIGKILL)
                alive = True
        if _same(container, record.get("pid_start", -1)):
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(container, signal.SIGKILL)
                alive = True
        killed += alive
    return killed
