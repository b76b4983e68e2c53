"""`make run`: a virtual node doing real work, on the local control plane or yours.

Brings up the local control plane (unless KUBECONFIG names a cluster), starts
`python -m vkpy` with the default backend as a child process, waits for its Node to
be Ready, applies `examples/hello.yaml`, prints the kubectl commands to try, and then
stays in the foreground with vkpy's logs until Ctrl-C, which stops vkpy (the control
plane keeps running; `make cluster-down` stops it).
"""

from __future__ import annotations

import json
import os
import shlex
import signal
import subprocess
import sys
import time
from pathlib import Path

from .access import ClusterAccess
from .binaries import find_bin_dir
from .cluster import DevCluster

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "hello.yaml"


def _cluster(directory: Path) -> ClusterAccess:
    external = os.environ.get("KUBECONFIG")
    if external:
        print(f"using the cluster in KUBECONFIG={external}")
        return ClusterAccess(
            kubeconfig=Path(external).absolute(), kubectl=find_bin_dir() / "kubectl"
        )
    cluster = DevCluster(directory)
    began = time.monotonic()
    started = cluster.up()
    what = f"started in {time.monotonic() - began:.0f} s" if started else "reused"
    print(f"local control plane at {cluster.server} ({what})")
    return cluster.access()


def _node_ready(access: ClusterAccess, node: str) -> bool:
    got = access.run_kubectl("get", "node", node, "-o", "json", check=False)
    if got.returncode != 0:
        return False
    conditions = json.loads(got.stdout).get("status", {}).get("conditions", [])
    return any(c["type"] == "Ready" and c["status"] == "True" for c in conditions)


def run(directory: Path, node: str, provider: str | None) -> int:
    access = _cluster(directory)
    argv = [
        sys.executable,
        "-m",
        "vkpy",
        f"--kubeconfig={access.kubeconfig}",
        f"--node-name={node}",
    ]
    if provider:
        argv.append(f"--provider={provider}")
    if not os.environ.get("KUBECONFIG"):
        argv += ["--node-ip=127.0.0.1", "--listen-address=127.0.0.1"]
    print("starting:", shlex.join(argv))
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
