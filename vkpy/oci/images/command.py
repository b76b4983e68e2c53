"""`python -m vkpy images ...`: the node's image store from the command line.

`import FILE` loads an OCI layout or docker-archive tarball into the store (for
nodes that reach no registry, as `kind load` does); `list` shows what the store
holds. The store is the node's: `<state-dir>/images`, with the same `--state-dir`
and `--node-name` (and VKPY_ variables) as vkpy itself.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
from collections.abc import Callable, Sequence
from pathlib import Path

from vkpy.oci.images.errors import ImageError
from vkpy.oci.images.importer import import_archive
from vkpy.oci.images.store import node_store


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m vkpy images",
        description="The node's image store (<state-dir>/images): load image archives "
        "into it for nodes that reach no registry, list what it holds.",
    )
    p.add_argument(
        "--node-name",
        default=os.environ.get("VKPY_NODE_NAME", "vkpy"),
        help="the node whose store it is (default vkpy), for the default --state-dir",
    )
    p.add_argument(
        "--state-dir",
        default=os.environ.get("VKPY_STATE_DIR"),
        help="the node's state directory (default: as vkpy's)",
    )
    sub = p.add_subparsers(dest="action", required=True)
    load = sub.add_parser("import", help="load an OCI layout or docker-archive tarball")
    load.add_argument("file", type=Path)
    load.add_argument(
        "--name", help="reference for an unnamed image (or repository for a bare tag)"
    )
    sub.add_parser("list", help="the images in the store")
    return p


def main(argv: Sequence[str], default_state_dir: Callable[[str], str]) -> int:
    args = parser().parse_args(argv)
    store = node_store(Path(args.state_dir or default_state_dir(args.node_name)))
    try:
        if args.action == "import":
            if not args.file.is_file():
                raise ImageError(f"{args.file}: no such file")
            for ref in asyncio.run(import_archive(store, args.file, args.name)):
                image = store.lookup(ref)
                print(f"imported {ref} ({image.image_id if image else '?'})")
        else:
            for image in store.images():
                print(f"{image.manifest_digest}  {image.size:>12}  {' '.join(image.refs)}")
    except ImageError as error:
        print(f"vkpy images: error: {error}", file=sys.stderr)
        return 1
    return 0
