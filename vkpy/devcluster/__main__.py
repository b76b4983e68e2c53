"""`python -m vkpy.devcluster up|down|env|run`: the local control plane from a shell.

`make cluster`, `make cluster-down` and developers use this to get a control plane
that keeps running after the command returns (its processes are detached), to point
a shell at it, and to stop it again.
"""

from __future__ import annotations

import argparse
import logging
import os
import shlex
import sys
import time
from collections.abc import Sequence
from pathlib import Path

from . import demo
from .binaries import BinariesMissing, pinned_release
from .cluster import ClusterError, DevCluster


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m vkpy.devcluster", description="The local Kubernetes control plane."
    )
    commands = parser.add_subparsers(dest="command", required=True)
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument(
        "--dir",
        type=Path,
        default=Path(os.environ.get("VKPY_CLUSTER_DIR", ".cluster")),
        help="cluster directory (default: $VKPY_CLUSTER_DIR or .cluster)",
    )
    up = commands.add_parser("up", parents=[common], help="start (or reuse) the control plane")
    up.add_argument(
        "--verify-kubelet-certs",
        "--kubelet-certificate-authority",
        dest="verify_kubelet_certs",
        action="store_true",
        help="make the API server verify kubelet serving certificates (kubelet signing CA)",
    )
    down = commands.add_parser("down", parents=[common], help="stop the control plane")
    down.add_argument("--purge", action="store_true", help="also delete what it wrote in --dir")
    commands.add_parser("env", parents=[common], help="print shell exports for the cluster")
    run = commands.add_parser(
        "run",
        parents=[common],
        help="control plane (or KUBECONFIG's cluster) + a virtual node + examples/hello.yaml",
    )
    run.add_argument("--node-name", default="vkpy-dev", help="name of the virtual node")
    run.add_argument("--provider", default=None, help="backend (default: vkpy's default)")
    return parser


def _up(cluster: DevCluster) -> None:
    began = time.monotonic()
    started = cluster.up()
    took = time.monotonic() - began
    what = f"started in {took:.1f} s" if started else "already running, reused"
    print(f"Kubernetes {pinned_release()} control plane at {cluster.server} ({what}).")
    print(f"  export KUBECONFIG={shlex.quote(str(cluster.kubeconfig))}")
    print(f"  kubectl: {cluster.kubectl}  (use this one, not the kubectl on PATH)")
    print(f'  or: eval "$(python -m vkpy.devcluster env --dir {shlex.quote(str(cluster.dir))})"')
    print(f"  logs: {cluster.logs_dir}/")
    print(f"  stop: python -m vkpy.devcluster down --dir {shlex.quote(str(cluster.dir))}")


def _env(cluster: DevCluster) -> None:
    if not cluster.is_running():
        raise ClusterError(f"no cluster is running in {cluster.dir}: run `up` first")
    print(f"export KUBECONFIG={shlex.quote(str(cluster.kubeconfig))}")
    print(f'export PATH={shlex.quote(str(cluster.kubectl.parent))}:"$PATH"')
    print(f"export VKPY_CLUSTER_DIR={shlex.quote(str(cluster.dir))}")


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(message)s", stream=sys.stderr)
    try:
        if args.command == "up":
            _up(DevCluster(args.dir, verify_kubelet_certs=args.verify_kubelet_certs))
        elif args.command == "down":
            cluster = DevCluster(args.dir)
            running = cluster.running_components()
            cluster.down(purge=args.purge)
            what = f"stopped {', '.join(running)}" if running else "nothing was running"
            print(f"{what} in {cluster.dir}" + (" (purged)" if args.purge else ""))
        elif args.command == "env":
            _env(DevCluster(args.dir))
        elif args.command == "run":
            return demo.run(args.dir, args.node_name, args.provider)
    except (ClusterError, BinariesMissing) as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
