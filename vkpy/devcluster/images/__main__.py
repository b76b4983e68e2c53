"""`python -m vkpy.devcluster.images [NAME ...]` (`make images`): build the dev
cluster's images now (cached ones are reused) and print each one's digest, size
and build time, so a slow first `make run` can be done ahead, and figures taken."""

from __future__ import annotations

import logging
import sys

from . import ImageBuildError, build, cache_dir, names


def main(argv: list[str]) -> int:
    logging.basicConfig(level=logging.INFO, format="%(message)s", stream=sys.stderr)
    unknown = set(argv) - set(names())
    if unknown:
        print(f"unknown images {sorted(unknown)}; known: {', '.join(names())}", file=sys.stderr)
        return 2
    try:
        built = build(argv or None)
    except ImageBuildError as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    print(f"images in {cache_dir()}:")
    for image in built:
        print(
            f"  {image.image.name:8} {image.digest[:19]}  {image.size / 1e6:6.1f} MB  "
            f"{image.seconds:6.1f} s  {image.layout.name}"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
