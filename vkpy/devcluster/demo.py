"""`make run`: a virtual node doing real work, on the local control plane or yours.

Brings up the local control plane (unless KUBECONFIG names a cluster) with
metrics-server (so `kubectl top` works), the image registry the nodes use as their
mirror (registry.py, filled with the images built here) and any regular workers
asked for, starts `python -m vkpy` with the default backend as a child process (its
serving certificate from the kubelet signing CA, so metrics-server can verify it),
waits for its Node to
be Ready, applies `examples/hello.yaml`, prints the kubectl commands to try, and then
stays in the foreground with vkpy's logs until Ctrl-C, which stops vkpy (the control
plane and the workers keep running; `make cluster-down` stops them).
"""

from __future__ import annotations

import json
import os
import shlex
import signal
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from types import FrameType
from urllib.parse import urlsplit

import yaml

from . import pod_network
from .access import ClusterAccess
from .binaries import find_bin_dir
from .cluster import DevCluster
from .images import catalogue
from .nodes import (
    NodeSpec,
    backend_reads_registries,
    issue_serving_cert,
    reachable_pods_dir,
    runs_images,
)

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "hello.yaml"


def _cluster(
    directory: Path,
    pool: Sequence[NodeSpec],
    metrics: bool,
    registry: bool = True,
    images: Sequence[str] | None = None,
) -> tuple[ClusterAccess, DevCluster | None]:
    external = os.environ.get("KUBECONFIG")
    if external:
        print(f"using the cluster in KUBECONFIG={external}")
        kubectl = find_bin_dir() / "kubectl"
        return ClusterAccess(kubeconfig=Path(external).absolute(), kubectl=kubectl), None
    cluster = DevCluster(directory)
    began = time.monotonic()
    started = cluster.up()
    what = f"started in {time.monotonic() - began:.0f} s" if started else "reused"
    print(f"local control plane at {cluster.server} ({what})")
    if metrics:
        cluster.start_metrics_server()
        print("metrics-server is serving v1beta1.metrics.k8s.io (kubectl top)")
    if registry:
        if images is None:
            images = catalogue.for_run(workers=bool(pool))
        print("building the images (cached after the first time) and filling the registry")
        began = time.monotonic()
        built = cluster.start_registry(images)
        served = ", ".join(b.image.name for b in built)
        host = cluster.extras().registry_host()
        print(f"image registry http://{host}: {served} ({time.monotonic() - began:.0f} s)")
    if pool:
        cluster.start_nodes(pool)
        print(f"regular workers Ready: {', '.join(s.name for s in pool)}")
    return cluster.access(), cluster


def _node_ready(access: ClusterAccess, node: str) -> bool:
    got = access.run_kubectl("get", "node", node, "-o", "json", check=False)
    if got.returncode != 0:
        return False
    conditions = json.loads(got.stdout).get("status", {}).get("conditions", [])
    return any(c["type"] == "Ready" and c["status"] == "True" for c in conditions)


def _interrupt(signum: int, frame: FrameType | None) -> None:
    raise KeyboardInterrupt


def run(
    directory: Path,
    node: str,
    provider: str | None,
    pool: Sequence[NodeSpec] = (),
    metrics: bool = True,
    *,
    registry: bool = True,
    images: Sequence[str] | None = None,
) -> int:
    access, local = _cluster(directory, pool, metrics, registry, images)
    argv = [
        sys.executable,
        "-m",
        "vkpy",
        f"--kubeconfig={access.kubeconfig}",
        f"--node-name={node}",
    ]
    if provider:
        argv.append(f"--provider={provider}")
    if local is not None:
        argv += ["--node-ip=127.0.0.1", "--listen-address=127.0.0.1"]
        node_dir = local.dir / "nodes" / node
        cert = issue_serving_cert(node, node_dir, local.pki)
        argv += [f"--tls-cert-file={cert.cert}", f"--tls-private-key-file={cert.key}"]
        # Inside the cluster's directory, so that `down` finds the pods left running.
        argv.append(f"--state-dir={node_dir / 'state'}")
        settings: dict[str, object] = {}
        mirrors = local.registries_setting()
        if mirrors is not None and provider in (None, "process") and backend_reads_registries():
            # The registry as the mirror of docker.io and registry.k8s.io (registry.py).
            settings["registries"] = mirrors
        if runs_images(provider, settings):
            # As root the node runs images through runc (the process backend's default),
            # each pod on a network of its own, where 127.0.0.1 is the pod: they reach
            # the API server through the relay the workers' pods use (pod_network.py).
            settings["pods_dir"] = str(reachable_pods_dir(node_dir))
            local.extras().start_api_relay()
            settings["kubernetes_service_host"] = pod_network.API_ADDRESS
            settings["kubernetes_service_port"] = urlsplit(local.server).port or 443
        if settings:
            config = node_dir / "provider.yaml"
            config.write_text(yaml.safe_dump(settings))
            argv.append(f"--provider-config={config}")
    print("starting:", shlex.join(argv))
    # A service manager or a closing terminal stops us with SIGTERM, not Ctrl-C:
    # treat it the same, so the virtual node is stopped rather than orphaned.
    signal.signal(signal.SIGTERM, _interrupt)
    child = subprocess.Popen(argv)
    try:
        deadline = time.monotonic() + 60
        while not _node_ready(access, node):
            if child.poll() is not None or time.monotonic() > deadline:
                print("vkpy did not become Ready; see its log above", file=sys.stderr)
                return 1
            time.sleep(0.5)
        access.run_kubectl("apply", "-f", str(EXAMPLE))
        kubectl = f"{access.kubectl} --kubeconfig={access.kubeconfig}"
        print(
            f"\nNode {node} is Ready and examples/hello.yaml is applied. Try:\n"
            f"  {kubectl} get nodes -o wide\n"
            f"  {kubectl} get pod hello -o wide\n"
            f"  {kubectl} describe pod hello\n"
            f"  {kubectl} logs -f hello\n"
            f"  {kubectl} apply -f {EXAMPLE.parent / 'nginx.yaml'}   # the getting-started pod\n"
            f"  {kubectl} port-forward pod/serverless-nginx 8080:80   # curl -I localhost:8080\n"
            f"  {kubectl} top node; {kubectl} top pod\n"
            "Ctrl-C stops vkpy; `make cluster-down` stops the control plane.\n",
            flush=True,
        )
        return child.wait()
    except KeyboardInterrupt:
        child.send_signal(signal.SIGTERM)
        child.wait(timeout=30)
        return 0
    finally:
        if child.poll() is None:
            child.send_signal(signal.SIGTERM)
            child.wait(timeout=30)
