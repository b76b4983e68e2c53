"""What vkpy's small in-cluster commands share: the chart's uninstall hook
(`python -m vkpy.tools.uninstall`) and CSR approver (`python -m vkpy.tools.approver`).

Both take a kubeconfig or run with their pod's service account, log the same way,
refuse to start when they have neither, and hold one API-server client for their
run. vkpy itself (cli.py) has its own, larger option set and checks.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager

from vkpy.core import log as vklog
from vkpy.kube.client import ClientOptions, KubeClient


def parser(prog: str, description: str) -> argparse.ArgumentParser:
    """A parser with the options every such command has: --kubeconfig and logging."""
    p = argparse.ArgumentParser(prog=f"python -m {prog}", description=description)
    p.add_argument("--kubeconfig", default=os.environ.get("KUBECONFIG"), help="default: in-cluster")
    p.add_argument("--log-format", default="json", choices=["text", "json"])
    p.add_argument("--log-level", default="info", choices=["debug", "info", "warning", "error"])
    return p


def parse(p: argparse.ArgumentParser, argv: Sequence[str] | None) -> argparse.Namespace | None:
    """The arguments, with logging set up; None (and the reason on stderr) when there
    is neither a kubeconfig nor a cluster to run in."""
    args = p.parse_args(argv)
    vklog.setup(args.log_level, args.log_format)
    if not args.kubeconfig and not os.environ.get("KUBERNETES_SERVICE_HOST"):
        name = p.prog.removeprefix("python -m ")
        print(f"{name}: error: no --kubeconfig and not running in a cluster", file=sys.stderr)
        return None
    return args


@asynccontextmanager
async def client(args: argparse.Namespace) -> AsyncIterator[KubeClient]:
    """The command's API-server client, closed when it is done."""
    kube = await KubeClient.connect(ClientOptions(kubeconfig=args.kubeconfig))
    try:
        yield kube
    finally:
        await kube.close()
