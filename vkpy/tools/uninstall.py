"""`python -m vkpy.tools.uninstall`: take a virtual node out of the cluster, leaving nothing.

Deleting the chart's Deployment alone would leave the Node behind (NotReady forever)
and, worse, the backend's workloads running: once the Node is gone the pod garbage
collector deletes the pods from the API without anyone stopping them in the cloud.
So the chart runs this as a `pre-delete` hook, while vkpy still runs:

1. cordon the Node, so nothing new lands on it;
2. delete every pod bound to it and wait until they are gone: vkpy stops each one in
   the backend (grace periods and preStop hooks honoured, as on a drained node),
   and their controllers recreate them wherever they fit;
3. scale vkpy's Deployment to zero and wait until its pods are gone, so no replica
   registers the Node again;
4. delete the Node (its heartbeat Lease goes with it: the Node owns it) and the
   replicas' leader Lease.

A node set (`--node-selector vkpy.io/node-set=<set>`: every Node of the set carries
that label) is taken out the same way, each step for all its nodes at once; the
set's Leases (the nodes' and the replicas', labelled alike) go in one request
(`--lease-selector`).

Every step is best effort after its timeout (a warning is logged and the next step
runs), so an uninstall is never stuck on a pod that does not go.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import sys
import time
from collections.abc import Awaitable, Callable, Sequence
from urllib.parse import quote

from vkpy.kube.client import MERGE_PATCH, ApiError, KubeClient
from vkpy.tools import command

log = logging.getLogger("vkpy.tools.uninstall")


def parser() -> argparse.ArgumentParser:
    p = command.parser(
        "vkpy.tools.uninstall", "Drain and delete a virtual node before its vkpy Deployment goes."
    )
    which = p.add_mutually_exclusive_group(required=True)
    which.add_argument("--node-name", help="the virtual node")
    which.add_argument("--node-selector", help="label selector of a node set's Nodes")
    p.add_argument("--namespace", required=True, help="namespace of vkpy's Deployment")
    p.add_argument("--deployment", required=True, help="vkpy's Deployment")
    p.add_argument("--selector", required=True, help="label selector of vkpy's pods")
    p.add_argument("--lease-namespace", default="kube-node-lease")
    p.add_argument("--lease-name", default="", help="the replicas' leader Lease")
    p.add_argument("--lease-selector", default="", help="label selector of a node set's Leases")
    p.add_argument("--timeout", type=float, default=120.0, help="seconds per waiting step")
    p.add_argument("--interval", type=float, default=1.0, help="seconds between checks")
    return p


async def _ignore_missing(call: Awaitable[object]) -> bool:
    """Run `call`; False when what it acts on does not exist."""
    try:
        await call
    except ApiError as error:
        if error.not_found:
            return False
        raise
    return True


async def _until(
    what: str, check: Callable[[], Awaitable[int]], timeout: float, interval: float
) -> bool:
    """Wait until `check()` counts nothing left; False (and a warning) on timeout."""
    deadline = time.monotonic() + timeout
    while True:
        left = await check()
        if left == 0:
            return True
        if time.monotonic() >= deadline:
            log.warning("gave up waiting", extra={"what": what, "left": left})
            return False
        await asyncio.sleep(interval)


class Uninstall:
    """The four steps of the module docstring, for one node or a node set."""

    def __init__(self, client: KubeClient, args: argparse.Namespace) -> None:
        self.client = client
        self.args = args

    async def nodes(self) -> list[str]:
        """The Nodes to take out (those of the set that still exist)."""
        if self.args.node_name:
            return [self.args.node_name]
        found = await self.client.get(
            "/api/v1/nodes", query={"labelSelector": self.args.node_selector}
        )
        return [n["metadata"]["name"] for n in found["items"]]

    async def node_pods(self, nodes: list[str]) -> list[tuple[str, str]]:
        out: list[tuple[str, str]] = []
        for node in nodes:
            pods = await self.client.get(
                "/api/v1/pods", query={"fieldSelector": f"spec.nodeName={node}"}
            )
            out += [(p["metadata"]["namespace"], p["metadata"]["name"]) for p in pods["items"]]
        return out

    async def vkpy_pods(self) -> int:
        path = f"/api/v1/namespaces/{quote(self.args.namespace)}/pods"
        pods = await self.client.get(path, query={"labelSelector": self.args.selector})
        return len(pods["items"])

    async def run(self) -> None:
        args = self.args
        cordoned: list[str] = []
        for node in await self.nodes():
            cordon = self.client.patch(
                _node_path(node), {"spec": {"unschedulable": True}}, MERGE_PATCH
            )
            if await _ignore_missing(cordon):
                log.info("cordoned", extra={"node": node})
                cordoned.append(node)
        if cordoned:
            pods = await self.node_pods(cordoned)
            for namespace, name in pods:
                path = f"/api/v1/namespaces/{quote(namespace)}/pods/{quote(name)}"
                await _ignore_missing(self.client.delete(path))
            log.info("deleting pods", extra={"nodes": len(cordoned), "pods": len(pods)})

            async def pods_left() -> int:
                return len(await self.node_pods(cordoned))

            await _until("the nodes' pods to go", pods_left, args.timeout, args.interval)
        scale = (
            f"/apis/apps/v1/namespaces/{quote(args.namespace)}"
            f"/deployments/{quote(args.deployment)}/scale"
        )
        if await _ignore_missing(self.client.patch(scale, {"spec": {"replicas": 0}}, MERGE_PATCH)):
            log.info("scaled to zero", extra={"deployment": args.deployment})
            await _until("vkpy's pods to stop", self.vkpy_pods, args.timeout, args.interval)
        for node in await self.nodes():
            if await _ignore_missing(self.client.delete(_node_path(node))):
                log.info("node deleted", extra={"node": node})
        leases = f"/apis/coordination.k8s.io/v1/namespaces/{quote(args.lease_namespace)}/leases"
        leader = f"{leases}/{quote(args.lease_name)}"
        if args.lease_name and await _ignore_missing(self.client.delete(leader)):
            log.info("leader lease deleted", extra={"lease": args.lease_name})
        if args.lease_selector:
            await self.client.delete(leases, query={"labelSelector": args.lease_selector})
            log.info("the set's leases deleted", extra={"selector": args.lease_selector})


def _node_path(name: str) -> str:
    return f"/api/v1/nodes/{quote(name)}"


async def _run(args: argparse.Namespace) -> int:
    async with command.client(args) as client:
        await Uninstall(client, args).run()
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    args = command.parse(parser(), argv)
    if args is None:
        return 2
    try:
        return asyncio.run(_run(args))
    except ApiError as error:
        log.error("uninstall failed", extra={"error": str(error)})
        return 1


if __name__ == "__main__":
    sys.exit(main())
