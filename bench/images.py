"""Image benchmark: what a pull, an unpack and a removal cost on this machine.

The busybox image of tests/registry.py (built from Debian's busybox-static with umoci)
in Debian's docker-registry on loopback, pulled with skopeo into fresh node stores
(vkpy/oci/images): a cold pull, `IfNotPresent` when present, `Always` when the tag
has not moved, a per-pod unpack with an id map (root; rootless otherwise) and the
removal of that root filesystem. Medians of `--rounds` fresh stores; figures into
docs/images.md by hand ("Measured").
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from tests.registry import Registry, busybox_layout
from vkpy.oci.images import registries
from vkpy.oci.images.pull import Puller
from vkpy.oci.images.store import ImageStore
from vkpy.oci.images.unpack import IdMap, remove_rootfs, unpack


async def measure(rounds: int) -> dict[str, list[float]]:
    tmp = Path(tempfile.mkdtemp(prefix="vkpy-bench-images-"))
    registry = Registry(tmp / "registry").start()
    figures: dict[str, list[float]] = {
        k: [] for k in ("cold", "if-not-present", "always-unchanged", "unpack", "remove")
    }
    try:
        registry.push(busybox_layout(), "library/busybox:1.35")
        image = f"{registry.host}/library/busybox:1.35"
        hosts = registries.from_config({registry.host: {"insecure": True}})
        for i in range(rounds):
            store = ImageStore(tmp / f"store-{i}")
            pull = Puller(store, hosts)
            figures["cold"].append((await pull.ensure(image)).seconds)
            figures["if-not-present"].append((await pull.ensure(image, "IfNotPresent")).seconds)
            figures["always-unchanged"].append((await pull.ensure(image, "Always")).seconds)
            id_map = IdMap(0, 300000 + i * 65536, 65536) if os.geteuid() == 0 else None
            started = time.monotonic()
            rootfs = await unpack(store, image, tmp / f"rootfs-{i}", id_map)
            figures["unpack"].append(time.monotonic() - started)
            started = time.monotonic()
            remove_rootfs(rootfs)
            figures["remove"].append(time.monotonic() - started)
        stored = store.lookup(image)
        print(f"image size {stored.size if stored else '?'} bytes")
    finally:
        registry.stop()
    return figures


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rounds", type=int, default=5)
    args = p.parse_args()
    figures = asyncio.run(measure(args.rounds))
    print(f"load average {os.getloadavg()[0]:.1f}, {os.cpu_count()} cores")
    for name, values in figures.items():
        print(f"{name:>18}: median {statistics.median(values) * 1000:.0f} ms")


if __name__ == "__main__":
    main()
