"""`python -m vkpy.devcluster up|down|env|run|demo`: the local control plane from a shell.

`up` and `run` also start the image registry the nodes pull from (registry.py).

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

from . import demo, hybrid_demo, images, nodes
from .binaries import BinariesMissing, pinned_release
from .cluster import ClusterError, DevCluster
from .extras import ExtrasFailed
from .images import ImageBuildError
from .nodes import NodeSpec
from .registry import RegistryError


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
    _pool_options(up)
    up.add_argument(
        "--virtual",
        action="store_true",
        help="also start the virtual nodes vkpy-virtual (process) and vkpy-gpu (sim, GPUs)",
    )
    up.add_argument(
        "--pod-deletion-cost",
        type=int,
        default=None,
        help="vkpy-virtual writes this pod-deletion-cost on its ReplicaSet pods",
    )
    down = commands.add_parser(
        "down", parents=[common], help="stop the control plane, its nodes and their pods"
    )
    down.add_argument("--purge", action="store_true", help="also delete what it wrote in --dir")
    commands.add_parser("env", parents=[common], help="print shell exports for the cluster")
    run = commands.add_parser(
        "run",
        parents=[common],
        help="control plane (or KUBECONFIG's cluster) + a virtual node + examples/hello.yaml",
    )
    run.add_argument("--node-name", default="vkpy-dev", help="name of the virtual node")
    run.add_argument("--provider", default=None, help="backend (default: vkpy's default)")
    _pool_options(run)
    demo_cmd = commands.add_parser(
        "demo", parents=[common], help="play a scenario live: `demo hybrid` (burst + HPA)"
    )
    demo_cmd.add_argument("scenario", choices=["hybrid"])
    demo_cmd.add_argument("--load-cores", type=float, default=0.45, help="offered CPU load")
    demo_cmd.add_argument("--load-seconds", type=float, default=150.0, help="how long")
    return parser


def _pool_options(command: argparse.ArgumentParser) -> None:
    command.add_argument(
        "--workers",
        type=int,
        default=0,
        help="regular worker nodes vkpy-worker-1..N (process backend, untainted, "
        "2 CPU/4Gi/10 pods, node.kubernetes.io/pool=regular)",
    )
    command.add_argument(
        "--gpu-workers",
        type=int,
        default=0,
        help="how many of the workers advertise one nvidia.com/gpu",
    )
    command.add_argument(
        "--images",
        type=lambda text: [name for name in text.split(",") if name],
        default=None,
        help="images the registry serves, comma-separated "
        f"(default all: {','.join(images.names())})",
    )
    command.add_argument(
        "--no-registry",
        dest="registry",
        action="store_false",
        help="do not run the image registry (vkpy/devcluster/registry.py)",
    )
    command.add_argument(
        "--no-metrics-server",
        dest="metrics_server",
        action="store_false",
        help="do not start metrics-server (no `kubectl top`, no HPA on CPU)",
    )


def pool_specs(workers: int, gpu_workers: int) -> list[NodeSpec]:
    """The regular pool: the last `gpu_workers` of the `workers` advertise a GPU."""
    if workers < 0 or not 0 <= gpu_workers <= workers:
        raise ClusterError("--gpu-workers must be between 0 and --workers")
    first_gpu = workers - gpu_workers + 1
    return [nodes.worker(i, gpus=1 if i >= first_gpu else 0) for i in range(1, workers + 1)]


def _up(cluster: DevCluster, args: argparse.Namespace) -> None:
    began = time.monotonic()
    started = cluster.up()
    took = time.monotonic() - began
    what = f"started in {took:.1f} s" if started else "already running, reused"
    print(f"Kubernetes {pinned_release()} control plane at {cluster.server} ({what}).")
    if args.metrics_server:
        began = time.monotonic()
        cluster.start_metrics_server()
        took = time.monotonic() - began
        print(f"  metrics-server: v1beta1.metrics.k8s.io Available ({took:.1f} s)")
    if args.registry:
        began = time.monotonic()
        built = cluster.start_registry(args.images)
        took = time.monotonic() - began
        host = cluster.extras().registry_host()
        served = ", ".join(b.image.name for b in built)
        print(f"  registry: http://{host} serving {served} ({took:.1f} s)")
        print(f"  mirrors: {cluster.dir / 'registry' / 'registries.conf'}")
    specs = pool_specs(args.workers, args.gpu_workers)
    if args.virtual:
        specs += [nodes.virtual(args.pod_deletion_cost), nodes.gpu_virtual()]
    if specs:
        began = time.monotonic()
        cluster.start_nodes(specs)
        names = ", ".join(s.name for s in specs)
        print(f"  nodes Ready: {names} ({time.monotonic() - began:.1f} s)")
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
            _up(DevCluster(args.dir, verify_kubelet_certs=args.verify_kubelet_certs), args)
        elif args.command == "down":
            cluster = DevCluster(args.dir)
            running = cluster.running_components()
            cluster.down(purge=args.purge)
            what = f"stopped {', '.join(running)}" if running else "nothing was running"
            print(f"{what} in {cluster.dir}" + (" (purged)" if args.purge else ""))
        elif args.command == "env":
            _env(DevCluster(args.dir))
        elif args.command == "run":
            pool = pool_specs(args.workers, args.gpu_workers)
            return demo.run(
                args.dir,
                args.node_name,
                args.provider,
                pool,
                args.metrics_server,
                registry=args.registry,
                images=args.images,
            )
        elif args.command == "demo":
            return hybrid_demo.run(args.dir, args.load_cores, args.load_seconds)
    except (ClusterError, BinariesMissing, ExtrasFailed, ImageBuildError, RegistryError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
