"""How vkpy's cost grows with the number of pods, next to kwok's (issue 17).

For each N (default 100, 1000, 5000) one peers run (bench/peers.py, same control
plane, systems interleaved, N pods bound to one node and then deleted) gives pods/s,
CPU per pod and RSS for vkpy and kwok. Reported as one table per measure, N by
system with the vkpy / kwok ratio, plus plots against N (`--plots DIR`: pods/s,
CPU seconds for the whole burst, settled RSS), so a reader sees whether the cost is
linear and where it bends, as SVG and PNG (bench/svgplot.py). Appended to
docs/benchmarks.md unless --no-write.

    python bench/curve.py --pods 100 1000 5000 --plots docs/plots
"""

from __future__ import annotations

import argparse
import asyncio
import copy
import os
import platform
import sys
import tempfile
from datetime import UTC, datetime
from pathlib import Path

import published
from peers import Measured, fmt, measure
from svgplot import write

from vkpy.devcluster import given_or_started

ROOT = Path(__file__).resolve().parents[1]
SYSTEMS = ("kwok", "vkpy")
MEASURES = (
    "pods/s to Running",
    "p99 create→Running ms",
    "CPU ms per pod",
    "peak RSS MiB",
    "settled RSS MiB",
    "API writes per pod",
)


def table(points: dict[int, Measured]) -> str:
    lines = ["| N | measure | kwok | vkpy | vkpy / kwok |", "|---|---|---|---|---|"]
    for n, measured in sorted(points.items()):
        for m in MEASURES:
            kwok = measured.results.get("kwok", {}).get(m, float("nan"))
            vkpy = measured.results.get("vkpy", {}).get(m, float("nan"))
            ratio = fmt(vkpy / kwok) if kwok else "—"
            lines.append(f"| {n} | {m} | {fmt(kwok)} | {fmt(vkpy)} | {ratio} |")
        load = ", ".join(measured.loads)
        lines.append(f"| {n} | load average at each round's start | {load} | | |")
    return "\n".join(lines)


def plots(points: dict[int, Measured], folder: Path) -> None:
    def series(measure: str, scale: bool = False) -> dict[str, list[tuple[float, float]]]:
        return {
            s: [
                (n, m.results[s][measure] * (n / 1000 if scale else 1))
                for n, m in sorted(points.items())
                if s in m.results
            ]
            for s in SYSTEMS
        }

    write(
        folder,
        "curve-pods-per-second",
        series("pods/s to Running"),
        "pods (N)",
        "pods/s to Running",
    )
    write(
        folder,
        "curve-cpu",
        series("CPU ms per pod", scale=True),
        "pods (N)",
        "CPU seconds, whole burst",
    )
    write(folder, "curve-rss", series("settled RSS MiB"), "pods (N)", "settled RSS (MiB)")


async def run(args: argparse.Namespace, kubeconfig: Path, workdir: Path) -> dict[int, Measured]:
    points: dict[int, Measured] = {}
    for n in args.pods:
        one = copy.copy(args)
        one.pods, one.systems, one.no_scheduled, one.vk_pods = n, list(SYSTEMS), True, 0
        one.rounds = args.rounds if n <= args.rounds_up_to else 1
        points[n] = await measure(one, kubeconfig, workdir)
        print(table(points), file=sys.stderr)
    return points


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pods", type=int, nargs="+", default=[100, 1000, 5000])
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument(
        "--rounds-up-to", type=int, default=1000, help="one round for larger N (time)"
    )
    parser.add_argument("--timeout", type=float, default=900, help="per step (s)")
    parser.add_argument("--event-loop", default="asyncio", choices=["asyncio", "uvloop"])
    parser.add_argument("--vkpy-arg", action="append", default=[], help="extra vkpy flag")
    parser.add_argument("--kubeconfig", type=Path, help="existing cluster (default: start one)")
    parser.add_argument(
        "--plots", "--svg", type=Path, help="write the plots (SVG and PNG) into this folder"
    )
    published.add_options(parser)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="vkpy-curve-") as tmp:
        workdir = Path(tmp)
        with given_or_started(args.kubeconfig, workdir) as access:
            points = asyncio.run(run(args, access.kubeconfig, workdir))
    if args.plots:
        plots(points, args.plots)
    versions = next(iter(points.values())).versions
    text = (
        f"### Cost against N, vkpy and kwok ({datetime.now(UTC):%Y-%m-%d %H:%M} UTC, "
        f"{platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()})\n\n"
        f"`python bench/curve.py --pods {' '.join(map(str, args.pods))} --rounds {args.rounds}`"
        f": per N, a peers run (N pods bound to one node, then deleted; {args.rounds} rounds "
        f"up to N={args.rounds_up_to}, one above; systems interleaved; medians). Versions: "
        + "; ".join(f"{k}: {v}" for k, v in versions.items())
        + ".\n\n"
        + table(points)
        + "\n"
    )
    print(text)
    published.append(text, args)
    return 0


if __name__ == "__main__":
    sys.exit(main())
