"""The node's image store: one OCI image layout shared by every pod on the node.

    <state-dir>/images/
      oci/             the OCI image layout (blobs/sha256/..., index.json), written
                       by skopeo, read by umoci; index.json is the index of
                       reference → manifest digest (`org.opencontainers.image.ref.name`
                       is the normalised reference)
      images.json      what the layout does not hold: each reference's repository
                       digest (what the registry calls it, the pod's imageID) and when
                       each image was last used (for garbage collection)
      lock             the lock every skopeo/umoci run holds (see tools.py)
      home/, tmp/      skopeo's isolated home and its temporary files

Content is addressed by digest: a blob's file name is its digest, skopeo checks every
blob it downloads against it, umoci checks every blob it reads, and `manifest()` here
checks the manifest it parses.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from vkpy.core.clock import SYSTEM_CLOCK, Clock
from vkpy.oci.images import tools
from vkpy.oci.images.config import ImageConfig
from vkpy.oci.images.errors import ImageNotFound, ImageToolError
from vkpy.oci.images.reference import parse

REF_NAME = "org.opencontainers.image.ref.name"
POLICY = {"default": [{"type": "insecureAcceptAnything"}]}  # the kubelet checks no signatures


@dataclass(frozen=True)
class StoredImage:
    """One image (one manifest) in the store, under one or more references."""

    manifest_digest: str
    refs: tuple[str, ...]
    repo_digests: tuple[str, ...]  # "registry/repository@sha256:..."
    size: int  # manifest + config + layers, bytes
    last_used: float

    @property
    def image_id(self) -> str:
        """What the kubelet reports as `containerStatuses[].imageID`."""
        return self.repo_digests[0] if self.repo_digests else self.manifest_digest


def write_file(path: Path, text: str) -> None:
    """Replace `path` with `text` in one step (a skopeo of another process may be
    reading it), and only when it changes."""
    try:
        if path.read_text() == text:
            return
    except FileNotFoundError:
        pass
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(text)
    os.replace(tmp, path)


def node_store(state_dir: Path, tool_paths: tools.Tools | None = None) -> ImageStore:
    """The store of the node whose state directory is `state_dir`."""
    return ImageStore(state_dir / "images", tool_paths)


class ImageStore:
    def __init__(
        self, root: Path, tool_paths: tools.Tools | None = None, clock: Clock = SYSTEM_CLOCK
    ) -> None:
        self.root = root
        self.tools = tool_paths or tools.Tools()
        self.clock = clock
        self.layout = root / "oci"
        self.lock = root / "lock"
        self.tmp = root / "tmp"
        self.home = root / "home"
        self.policy = root / "policy.json"
        self._meta = root / "images.json"
        self._meta_lock = root / "images.lock"
        root.mkdir(parents=True, exist_ok=True, mode=0o711)
        # Images pulled with a pull secret are for the node's pods, not the host's users.
        self.layout.mkdir(exist_ok=True, mode=0o700)
        self.tmp.mkdir(exist_ok=True, mode=0o700)
        self.lock.touch(exist_ok=True)
        write_file(self.policy, json.dumps(POLICY))

    def layout_ref(self, ref: str) -> str:
        """`oci:` / umoci's `--image` form for a reference in this store."""
        return f"{self.layout}:{ref}"

    # -- reading ---------------------------------------------------------------

    def index(self) -> dict[str, dict[str, Any]]:
        """reference → manifest descriptor, from the layout's index.json."""
        try:
            document = json.loads((self.layout / "index.json").read_text())
        except FileNotFoundError:
            return {}
        refs = {}
        for descriptor in document.get("manifests") or []:
            name = (descriptor.get("annotations") or {}).get(REF_NAME)
            if name:
                refs[name] = descriptor
        return refs

    def blob_path(self, digest: str) -> Path:
        algorithm, _, hexdigest = digest.partition(":")
        return self.layout / "blobs" / algorithm / hexdigest

    def blob(self, digest: str) -> bytes:
        """A blob's bytes, checked against its digest."""
        try:
            data = self.blob_path(digest).read_bytes()
        except FileNotFoundError as error:
            raise ImageNotFound(f"blob {digest} is not in the image store") from error
        if "sha256:" + hashlib.sha256(data).hexdigest() != digest:
            raise ImageToolError(f"blob {digest} in the image store does not match its digest")
        return data

    def manifest(self, digest: str) -> dict[str, Any]:
        document: dict[str, Any] = json.loads(self.blob(digest))
        return document

    def config(self, ref: str) -> ImageConfig:
        """The image config of `ref` (a stored reference)."""
        descriptor = self.index().get(ref)
        if descriptor is None:
            raise ImageNotFound(f"image {ref} is not in the image store")
        manifest = self.manifest(descriptor["digest"])
        return ImageConfig.from_json(json.loads(self.blob(manifest["config"]["digest"])))

    def images(self) -> list[StoredImage]:
        """Every image in the store, one per manifest."""
        meta = self._read_meta()
        by_digest: dict[str, list[str]] = {}
        for ref, descriptor in sorted(self.index().items()):
            by_digest.setdefault(descriptor["digest"], []).append(ref)
        found = []
        for digest, refs in by_digest.items():
            repo_digests = sorted(
                {meta["refs"][r]["repo_digest"] for r in refs if r in meta["refs"]}
            )
            found.append(
                StoredImage(
                    manifest_digest=digest,
                    refs=tuple(refs),
                    repo_digests=tuple(repo_digests),
                    size=self._size(digest),
                    last_used=float(meta["used"].get(digest, 0.0)),
                )
            )
        return found

    def lookup(self, ref: str) -> StoredImage | None:
        """The stored image under `ref` (normalised first), or None."""
        name = str(parse(ref))
        return next((image for image in self.images() if name in image.refs), None)

    def _size(self, digest: str) -> int:
        try:
            manifest = self.manifest(digest)
        except (ImageNotFound, ImageToolError, ValueError):
            return 0
        parts = [manifest.get("config") or {}, *(manifest.get("layers") or [])]
        return len(self.blob_path(digest).read_bytes()) + sum(int(p.get("size", 0)) for p in parts)

    # -- bookkeeping -----------------------------------------------------------

    def record(self, ref: str, repo_digest: str) -> None:
        """`ref` was just stored; `repo_digest` is `registry/repository@digest`."""
        with self._meta_update() as meta:
            meta["refs"][ref] = {"repo_digest": repo_digest, "stored": self.clock.time()}
        self.mark_used([ref])

    def mark_used(self, refs: Iterable[str]) -> None:
        """Now is the last use of the images under `refs` (a pull, an unpack)."""
        index = self.index()
        digests = {index[r]["digest"] for r in refs if r in index}
        with self._meta_update() as meta:
            for digest in digests:
                meta["used"][digest] = self.clock.time()

    def _read_meta(self) -> dict[str, Any]:
        try:
            meta: dict[str, Any] = json.loads(self._meta.read_text())
        except (FileNotFoundError, ValueError):
            meta = {}
        meta.setdefault("refs", {})
        meta.setdefault("used", {})
        return meta

    @contextmanager
    def _meta_update(self) -> Iterator[dict[str, Any]]:
        with open(self._meta_lock, "a") as lock_file:
            fcntl.flock(lock_file, fcntl.LOCK_EX)  # held for a read and a rename only
            meta = self._read_meta()
            yield meta
            index = self.index()
            meta["refs"] = {r: v for r, v in meta["refs"].items() if r in index}
            live = {d["digest"] for d in index.values()}
            meta["used"] = {d: t for d, t in meta["used"].items() if d in live}
            tmp = self._meta.with_suffix(".tmp")
            tmp.write_text(json.dumps(meta, indent=1, sort_keys=True))
            os.replace(tmp, self._meta)

    # -- removing --------------------------------------------------------------

    async def remove(self, refs: Iterable[str]) -> None:
        """Untag `refs` and delete every blob no remaining reference reaches."""
        refs = list(refs)
        for ref in refs:
            result = await tools.run(
                [self.tools.umoci, "rm", "--image", self.layout_ref(ref)], lock=self.lock
            )
            if result.returncode != 0:
                raise ImageToolError(f"cannot remove image {ref}: {result.last_error()}")
        result = await tools.run(
            [self.tools.umoci, "gc", "--layout", str(self.layout)], lock=self.lock
        )
        if result.returncode != 0:
            raise ImageToolError(f"cannot collect the image store's blobs: {result.last_error()}")
        with self._meta_update():
            pass  # drops the bookkeeping of what is gone
