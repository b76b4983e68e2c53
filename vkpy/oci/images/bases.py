"""Each image unpacked once per node: the shared lower layer of its containers' roots.

A container's root is an overlay whose lower layer is its image's tree, id-mapped to
the pod (vkpy.oci.runtime.overlay), so the image is unpacked once, with the ids it
carries, and never written again. The trees live in one directory per node, one
per manifest digest (`sha256-<hex>`); an unpack goes to a temporary name first and
is renamed into place when complete, so a tree that exists is whole, and two pods
asking at once for the same image unpack it once (a lock per digest). `prune`
removes the trees of images no longer in the store that no container's root lies on
(the caller says which).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import secrets
from collections.abc import Iterable
from pathlib import Path

from vkpy.oci.images.store import ImageStore
from vkpy.oci.images.unpack import remove_rootfs, unpack

TEMPORARY = ".unpacking-"


def _name(manifest_digest: str) -> str:
    algorithm, _, value = manifest_digest.partition(":")
    if not value or not algorithm.isalnum() or not value.isalnum():
        raise ValueError(f"not a digest: {manifest_digest!r}")
    return f"{algorithm}-{value}"


class Bases:
    """The node's unpacked images, in `root`."""

    def __init__(self, store: ImageStore, root: Path) -> None:
        self.store = store
        self.root = root
        self._locks: dict[str, asyncio.Lock] = {}

    def path(self, manifest_digest: str) -> Path:
        return self.root / _name(manifest_digest)

    async def tree(self, image_ref: str, manifest_digest: str) -> Path:
        """The unpacked tree of the stored image `image_ref` (unpacked now if needed)."""
        target = self.path(manifest_digest)
        lock = self._locks.setdefault(manifest_digest, asyncio.Lock())
        async with lock:
            if target.is_dir():
                self.store.mark_used([image_ref])
                return target
            self.root.mkdir(mode=0o700, parents=True, exist_ok=True)
            partial = self.root / f"{TEMPORARY}{secrets.token_hex(6)}"
            try:
                await unpack(self.store, image_ref, partial)
                os.rename(partial, target)
            finally:
                if partial.exists():
                    await asyncio.to_thread(remove_rootfs, partial)
        return target

    def prune(self, in_use: Iterable[str] = ()) -> list[Path]:
        """Remove trees of images the store no longer has, and unfinished unpacks;
        never those of the manifest digests `in_use` (a container's root lies on it)."""
        if not self.root.is_dir():
            return []
        kept = set()
        for digest in [*in_use, *(image.manifest_digest for image in self.store.images())]:
            with contextlib.suppress(ValueError):  # a damaged record names no tree
                kept.add(_name(digest))
        removed = []
        for entry in self.root.iterdir():
            if entry.name in kept:
                continue
            with contextlib.suppress(OSError):
                remove_rootfs(entry)
                removed.append(entry)
        return removed
