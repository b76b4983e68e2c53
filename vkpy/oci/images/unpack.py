"""A pod's root filesystem, unpacked from the store by umoci, and removed.

umoci applies the layers in order with OCI whiteouts (`.wh.` files and opaque
directories) and, given an id map, owns every file by the host id the pod's id maps
to, so the runtime can run the pod in a user namespace of its own (pod ids 0-65535
→ a host range per pod) on a root filesystem that its root owns. Without root umoci
runs `--rootless` (files owned by the caller), and no id map can be applied.
"""

from __future__ import annotations

import os
import shutil
import stat
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from vkpy.oci.images import tools
from vkpy.oci.images.errors import ImageNotFound, ImageToolError
from vkpy.oci.images.reference import parse
from vkpy.oci.images.store import ImageStore


@dataclass(frozen=True)
class IdMap:
    """Container ids [container, container+size) → host ids [host, host+size)."""

    container: int
    host: int
    size: int

    def arg(self) -> str:
        return f"{self.container}:{self.host}:{self.size}"


async def unpack(store: ImageStore, image: str, rootfs: Path, id_map: IdMap | None = None) -> Path:
    """Unpack `image` (a stored reference) into `rootfs`, which must not exist yet."""
    ref = str(parse(image))
    if ref not in store.index():
        raise ImageNotFound(f"image {image} is not in the image store")
    if rootfs.is_symlink() or rootfs.exists():  # noqa: ASYNC240 - one stat, no I/O wait
        raise ImageToolError(f"cannot unpack {image}: {rootfs} exists")
    if id_map is not None and os.geteuid() != 0:
        raise ImageToolError("an id map needs root (umoci --rootless cannot chown)")
    flags = ["--rootless"] if os.geteuid() != 0 else []
    if id_map is not None:
        flags += ["--uid-map", id_map.arg(), "--gid-map", id_map.arg()]
    rootfs.parent.mkdir(parents=True, exist_ok=True)
    result = await tools.run(
        [store.tools.umoci, "raw", "unpack", *flags, "--image", store.layout_ref(ref), str(rootfs)],
        lock=store.lock,
        shared=True,
    )
    if result.returncode != 0:
        remove_rootfs(rootfs)
        raise ImageToolError(f"cannot unpack {image}: {result.last_error()}")
    store.mark_used([ref])
    return rootfs


def remove_rootfs(rootfs: Path) -> None:
    """Delete an unpacked root filesystem, even its read-only directories. As root
    (whose deletes no mode bit stops) a failure is raised, never mended by a chmod on a
    path: a container's own writes are in these trees, and a directory it swapped for
    a link would take root's chmod elsewhere."""

    def make_writable(function: Callable[..., object], path: str, info: Any) -> None:
        if os.geteuid() == 0:
            raise info[1]
        parent = os.path.dirname(path)
        os.chmod(parent, os.stat(parent).st_mode | stat.S_IWUSR | stat.S_IXUSR)
        function(path)

    if os.path.lexists(rootfs):
        shutil.rmtree(rootfs, onerror=make_writable)  # onexc from 3.12
