"""Where a benchmark's figures go: appended to docs/benchmarks.md, or only printed.

Every script offered the same `--write`/`--no-write` options and appended its section
to the same file with its own copy of the same lines; they share these instead.
"""

from __future__ import annotations

import argparse
from pathlib import Path

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
