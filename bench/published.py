"""Where a benchmark's figures go: appended to docs/benchmarks.md, or only printed.

Every script offered the same `--write`/`--no-write` options and appended its section
to the same file with its own copy of the same lines; they share these instead.
"""

from __future__ import annotations

import argparse
import asyncio
import tempfile
from collections.abc import Callable, Coroutine
from pathlib import Path
from typing import Any

from vkpy.devcluster import ClusterAccess, given_or_started

Bench = Callable[[argparse.Namespace, ClusterAccess, Path], Coroutine[Any, Any, str]]

DOCS = Path(__file__).resolve().parents[1] / "docs" / "benchmarks.md"


def add_options(parser: argparse.ArgumentParser) -> None:
    """`--write FILE` (docs/benchmarks.md by default) and `--no-write`."""
    parser.add_argument("--write", type=Path, default=DOCS)
    parser.add_argument("--no-write", action="store_true", help="only print the figures")


def append(text: str, args: argparse.Namespace) -> None:
    """Adds the section `text` to the end of `--write`, unless `--no-write`."""
    if args.no_write:
        return
    existing = args.write.read_text() if args.write.exists() else "# Benchmarks\n"
    args.write.write_text(existing.rstrip() + "\n\n" + text)


def run_on_a_cluster(args: argparse.Namespace, prefix: str, bench: Bench) -> int:
    """Run `bench` on `--kubeconfig`'s cluster or one started for it in a scratch
    directory, then print its section and append it (unless `--no-write`)."""
    with tempfile.TemporaryDirectory(prefix=prefix) as tmp:
        workdir = Path(tmp)
        with given_or_started(args.kubeconfig, workdir) as access:
            text = asyncio.run(bench(args, access, workdir))
    print(text)
    append(text, args)
    return 0
