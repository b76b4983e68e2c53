"""`python -m vkpy.tools.approver`: approve vkpy's serving-certificate CSRs, refuse the rest.

The controller-manager signs kubelet-serving certificates but never approves them, so
a vkpy that gets its certificate by CSR (`--rotate-server-certificates`, the chart's
`servingCert.mode=csr`) needs someone to. This command runs vkpy.api.certs.csr_approver in a
loop: installed by the chart only when asked (`servingCert.approver.enabled`), with
RBAC limited to reading CSRs and Nodes and approving for the kubelet-serving signer.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
from collections.abc import Sequence

from vkpy.api.certs.csr_approver import CsrApprover
from vkpy.tools import command


def parser() -> argparse.ArgumentParser:
    p = command.parser(
        "vkpy.tools.approver",
        "Approve kubelet-serving CSRs of virtual nodes whose SANs are the node's own "
        "addresses; deny other kubelet-serving CSRs; ignore other signers.",
    )
    p.add_argument(
        "--allowed-requester",
        action="append",
        default=[],
        help="a user (e.g. system:serviceaccount:NS:NAME) allowed to request node serving "
        "certificates besides the node itself; repeatable",
    )
    p.add_argument("--interval", type=float, default=2.0, help="seconds between passes")
    p.add_argument(
        "--settle-seconds",
        type=float,
        default=60.0,
        help="how long a CSR whose node or addresses do not match yet waits before denial",
    )
    return p


async def _run(args: argparse.Namespace) -> int:
    async with command.client(args) as client:
        approver = CsrApprover(
            client,
            args.allowed_requester,
            interval=args.interval,
            settle_seconds=args.settle_seconds,
        )
        await approver.run()
    return 1


def main(argv: Sequence[str] | None = None) -> int:
    args = command.parse(parser(), argv)
    if args is None:
        return 2
    try:
        return asyncio.run(_run(args))
    except KeyboardInterrupt:
        return 0


if __name__ == "__main__":
    sys.exit(main())
