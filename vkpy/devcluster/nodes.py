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

import hashlib
import os
import shutil
import sys
from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from pathlib import Path
from urllib.parse import urlsplit

import yaml

from vkpy.providers.process import leftovers
from vkpy.providers.process.config import ProcessConfig

from . import pod_network
from .cluster_pki import LOOPBACK_IPS, ClusterPKI
from .cluster_pki import names_ips as _names_ips
from .components import LOOPBACK
from .pki import CertificateAuthority, CertPaths, write_pem

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
#: Where `runtime: oci` nodes keep their pods (one directory per node). Not under the
#: cluster directory: a container's root in its user namespace is a host id of the pod's
#: own, which must traverse every directory above its root filesystem, and a cluster
#: directory under a closed home (or pytest's 0700 temporary directories) is not.
OCI_PODS_ROOT = Path("/var/lib/vkpy-devcluster/pods")


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
    #: The node's address: the API server dials it, and (process backend) its pods
    #: have it as their IP. A loopback address of its own per worker, so pods that
    #: listen on their pod IP (the chart's vkpy, `listenAddress`) never collide
    #: with a pod of another worker on the same port.
    address: str = LOOPBACK

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
            f"--node-ip={self.address}",
            f"--listen-address={self.address}",
            f"--port={port}",
            f"--tls-cert-file={cert.cert}",
            f"--tls-private-key-file={cert.key}",
            "--node-lease-duration=12",
        ]
        argv += [f"--label={k}={v}" for k, v in self.labels.items()]
        argv += [f"--taint={t}" for t in self.taints] or ["--taint=none"]
        return argv + list(self.extra_args)


def worker(index: int, gpus: int = 0) -> NodeSpec:
    """Regular worker `vkpy-worker-<index>`: process backend, untainted, 2 CPU/4Gi/10 pods.

    As root it runs what a kubelet runs: images from the dev registry through runc,
    each pod in a user namespace (`runtime: oci`) and a network namespace with an
    address of its own (`network: pod`, its pod CIDR from pod_network.py). Without
    root neither is possible, and the worker runs host programs on the host's network."""
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
    config: dict[str, object] = {"capacity": capacity, "host_path_prefixes": [SHARED_HOST_PATH]}
    if os.geteuid() == 0:
        config.update(runtime="oci", network="pod")
    return NodeSpec(
        name=f"vkpy-worker-{index}",
        provider="process",
        labels=labels,
        provider_config=config,
        address=worker_address(index),
    )


def pod_networked(spec: NodeSpec) -> bool:
    """Whether the node gives each pod a network of its own (`network: pod`)."""
    return spec.provider == "process" and spec.provider_config.get("network") == "pod"


def worker_address(index: int) -> str:
    """Worker `index`'s own loopback address, 127.0.1.<index> (1-254)."""
    if not 0 < index < 255:
        raise ValueError(f"worker index {index} is outside 1-254")
    return f"127.0.1.{index}"


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


def backend_reads_registries() -> bool:
    """Whether this checkout's process backend takes a `registries:` setting (the
    mirrors of issue 31's image pulls); an older one refuses unknown settings."""
    return "registries" in {f.name for f in fields(ProcessConfig)}


def provider_config(
    spec: NodeSpec,
    server: str,
    registries: Mapping[str, object] | None = None,
    pod_cidr: str | None = None,
) -> dict[str, object]:
    """What the node's --provider-config file holds: the spec's settings and, for the
    process backend, what an in-cluster pod needs (chart installs run there):
    KUBERNETES_SERVICE_HOST/PORT naming an address of the API server the pods reach
    (there is no Service network here to route the `kubernetes` Service's ClusterIP):
    its loopback address for pods on the host's network, pod_network.API_ADDRESS
    (the relay on the API server's port) for pods with a network of their own, whose
    addresses come from `pod_cidr`; and the dev cluster registry as the mirror of the
    public registries (`registries`, when the backend reads it)."""
    config = dict(spec.provider_config)
    if spec.provider != "process":
        return config
    if registries is not None and backend_reads_registries():
        config.setdefault("registries", dict(registries))
    url = urlsplit(server)
    if pod_networked(spec):
        config.setdefault("kubernetes_service_host", pod_network.API_ADDRESS)
        if pod_cidr is not None:
            config.setdefault("pod_cidr", pod_cidr)
    else:
        config.setdefault("kubernetes_service_host", url.hostname or LOOPBACK)
    config.setdefault("kubernetes_service_port", url.port or 443)
    return config


def prepare(
    spec: NodeSpec,
    directory: Path,
    pki: ClusterPKI,
    server: str,
    registries: Mapping[str, object] | None = None,
    pod_cidr: str | None = None,
) -> None:
    """Write the node's provider config and its kubelet-serving certificate."""
    directory.mkdir(parents=True, exist_ok=True)
    config = provider_config(spec, server, registries, pod_cidr)
    if config.get("runtime") == "oci":
        config.setdefault("pods_dir", str(oci_pods_dir(directory)))
    (directory / "provider.yaml").write_text(yaml.safe_dump(config))
    issue_serving_cert(spec.name, directory, pki, spec.address)


def issue_serving_cert(
    node: str, directory: Path, pki: ClusterPKI, address: str = LOOPBACK
) -> CertPaths:
    """The node's serving certificate from the kubelet signing CA (kept once made for
    the same address), as a kubelet-serving CSR would give it: what metrics-server and
    a verifying API server trust."""
    cert = serving_cert(directory)
    ips = tuple(dict.fromkeys((address, *LOOPBACK_IPS)))
    if cert.cert.exists() and cert.key.exists() and _names_ips(cert.cert, ips):
        return cert
    ca = CertificateAuthority.load(pki.kubelet_ca.cert, pki.kubelet_ca.key)
    cert_pem, key_pem = ca.issue(
        f"system:node:{node}",
        organizations=("system:nodes",),
        dns_names=(node, "localhost"),
        ip_addresses=ips,
        server=True,
    )
    write_pem(cert.cert, cert_pem)
    write_pem(cert.key, key_pem, secret=True)
    return cert


def oci_pods_dir(node_dir: Path, root: Path = OCI_PODS_ROOT) -> Path:
    """The pods directory of the `runtime: oci` node whose files are in `node_dir`:
    below `root`, named after `node_dir` (the same again when the node restarts, so it
    adopts its pods), every level made traversable by others (0711) and listable by
    root only."""
    digest = hashlib.sha256(str(node_dir.absolute()).encode()).hexdigest()[:16]
    path = root / f"{node_dir.name}-{digest}"
    for level in (*reversed(path.relative_to(root.parent).parents), path.relative_to(root.parent)):
        directory = root.parent / level
        if not directory.exists():
            directory.mkdir(mode=0o711)
            directory.chmod(0o711)
    return path


def pods_dirs(state_dir: Path) -> list[Path]:
    """Where the node with `state_dir` keeps its pods: the backend's default, and the
    `pods_dir` of its provider config (oci_pods_dir) when set."""
    found = [state_dir / "process" / "pods"]
    try:
        config = yaml.safe_load((state_dir.parent / "provider.yaml").read_text())
    except (OSError, yaml.YAMLError):
        config = None
    if isinstance(config, dict) and config.get("pods_dir"):
        found.append(Path(str(config["pods_dir"])))
    return found


def kill_leftover_pods(state_dir: Path) -> int:
    """End the process backend's pods still running under `state_dir` (or its
    `pods_dir`), after the node's pods were deleted through the API (which is how they
    are normally stopped); returns how many containers were still running."""
    return sum(leftovers.end_pods(pods) for pods in pods_dirs(state_dir) if pods.is_dir())


def remove_oci_pods_dir(state_dir: Path, root: Path = OCI_PODS_ROOT) -> bool:
    """After `down` stopped the node with `state_dir` and its pods: delete its pods
    directory below `root` (unpacked images, the pods' volumes), which a cluster
    directory's removal does not reach. Left alone while anything is mounted below
    it (a volume bind still in place would take the host's files with it)."""
    for pods in pods_dirs(state_dir)[1:]:
        if pods.parent != root or not pods.is_dir():
            continue
        inside = str(pods) + "/"
        with open("/proc/self/mountinfo") as table:
            mounted = [line.split()[4] for line in table if len(line.split()) > 4]
        if any(point.startswith(inside) or point == str(pods) for point in mounted):
            return False
        shutil.rmtree(pods, ignore_errors=True)
        return not pods.exists()
    return False
