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

import dataclasses
import hashlib
import os
import shutil
import sys
from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from pathlib import Path
from urllib.parse import urlsplit

import yaml

from vkpy.providers.process import leftovers, mountcalls
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
#: Below it, the pods of the dev cluster's process nodes when vkpy runs as root (in
#: `runtime: oci`, reachable_pods_dir):
#: outside the cluster directory, which may sit where pods' ids cannot traverse.
RUN_PODS_ROOT = Path("/var/lib/vkpy/devcluster")
OWNER = "node-dir"
"""In each of RUN_PODS_ROOT's directories: the node directory it belongs to."""


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


def host_programs(spec: NodeSpec) -> NodeSpec:
    """`spec` with the process backend's host programs (`runtime: host`, the host's
    network) instead of its default as root, images through runc on a network per pod
    (vkpy/providers/process/modes.py): for pods written for host programs, as the
    hybrid demo's `python:3.12-slim` jobs, an image the dev registry does not serve."""
    if spec.provider != "process":
        return spec
    settings = {**spec.provider_config, "runtime": "host", "network": "host"}
    return dataclasses.replace(spec, provider_config=settings)


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
    if runs_images(spec.provider, config) and "pods_dir" not in config:
        config["pods_dir"] = str(reachable_pods_dir(directory))
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


def reachable_pods_dir(node_dir: Path) -> Path:
    """Where a dev-cluster process node's pods live when vkpy runs as root (its
    default `runtime: oci`): outside the cluster directory,
    which is often below a home directory others may not traverse (/root is 0700),
    while runc mounts each pod's root filesystem and volumes as the pod's unprivileged
    ids. `/var/lib/vkpy/devcluster/<hash of node_dir>/pods`, with a link to it at the
    node's `state/process/pods`, where `down` looks for pods left running (`down
    --purge` removes it). Those of cluster directories that are gone (a test's
    temporary one) are removed here, their containers ended first."""
    node_dir = node_dir.absolute()
    digest = hashlib.sha256(str(node_dir).encode()).hexdigest()[:16]
    pods = RUN_PODS_ROOT / digest / "pods"
    _remove_orphans()
    for directory in (RUN_PODS_ROOT.parent, RUN_PODS_ROOT, pods.parent, pods):
        if not directory.exists():
            directory.mkdir()
            directory.chmod(0o711)  # traversable, not listable
    (pods.parent / OWNER).write_text(str(node_dir))
    link = node_dir / "state" / "process" / "pods"
    link.parent.mkdir(parents=True, exist_ok=True)
    if link.is_symlink() and link.resolve() != pods.resolve():
        link.unlink()
    if not link.is_symlink():
        if link.is_dir():
            link.rmdir()  # an empty one from an earlier start; one with pods stays an error
        link.symlink_to(pods)
    return pods


def _remove_orphans() -> None:
    """The pod directories of `run` nodes whose directory is gone, their containers
    ended (leftovers.end_pods), so that test runs leave no disk behind for long."""
    if not RUN_PODS_ROOT.is_dir():
        return
    for entry in RUN_PODS_ROOT.iterdir():
        owner = entry / OWNER
        try:
            node_dir = Path(owner.read_text().strip())
        except OSError:
            continue
        if node_dir.exists():
            continue
        leftovers.end_pods(entry / "pods")
        shutil.rmtree(entry, ignore_errors=True)


def runs_images(provider: str | None, settings: Mapping[str, object]) -> bool:
    """Whether a node with these settings runs images through runc: the process
    backend as root, unless its settings choose host programs (modes.py)."""
    process = provider in (None, "process")
    return process and os.geteuid() == 0 and settings.get("runtime", "oci") == "oci"


def kill_leftover_pods(state_dir: Path) -> int:
    """End the process backend's pods still running under `state_dir` (or where its
    link points), after the node's pods were deleted through the API (which is how they
    are normally stopped); returns how many containers were still running."""
    return leftovers.end_pods(state_dir / "process" / "pods")


def remove_oci_pods_dir(state_dir: Path, root: Path | None = None) -> bool:
    """After `down` stopped the node with `state_dir` and ended its pods
    (kill_leftover_pods): delete its pods' directory below RUN_PODS_ROOT
    (reachable_pods_dir: unpacked images, the pods' volumes), which a cluster
    directory's removal does not reach. Left alone while anything is mounted below it
    (a volume bind still in place would take the host's files with it)."""
    root = RUN_PODS_ROOT if root is None else root
    link = state_dir / "process" / "pods"
    if not link.is_symlink():
        return False
    entry = link.resolve().parent
    if entry.parent != root or not entry.is_dir():
        return False
    inside = str(entry) + "/"
    if any(point.startswith(inside) for point in mountcalls.mount_points()):
        return False
    shutil.rmtree(entry, ignore_errors=True)
    link.unlink(missing_ok=True)
    return not entry.exists()
