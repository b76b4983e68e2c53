"""Which unpacked image trees a node keeps (bases.py): the store's images and those a
container's root lies on; unfinished unpacks and trees of removed images go."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast

from vkpy.oci.images.bases import Bases
from vkpy.oci.images.store import ImageStore

KEPT = "sha256:" + "a" * 64
USED = "sha256:" + "b" * 64
GONE = "sha256:" + "c" * 64


@dataclass
class Stored:
    manifest_digest: str


class StoreWith:
    """A stand-in for the image store: only the images it lists (pure logic)."""

    def __init__(self, *digests: str) -> None:
        self.digests = digests

    def images(self) -> list[Any]:
        return [Stored(digest) for digest in self.digests]


def test_prune_keeps_stored_and_used_trees_and_removes_the_rest(tmp_path: Path) -> None:
    bases = Bases(cast(ImageStore, StoreWith(KEPT)), tmp_path / "images")
    for digest in (KEPT, USED, GONE):
        tree = bases.path(digest)
        (tree / "bin").mkdir(parents=True)
        (tree / "bin" / "sh").write_text("x")
        (tree / "bin").chmod(0o555)  # read-only directories are removed too
    unfinished = tmp_path / "images" / ".unpacking-0123"
    unfinished.mkdir()

    removed = bases.prune([USED, "not a digest"])

    assert sorted(removed) == sorted([bases.path(GONE), unfinished])
    assert bases.path(KEPT).is_dir() and bases.path(USED).is_dir()
    assert not bases.path(GONE).exists() and not unfinished.exists()


def test_a_tree_is_named_by_its_digest_and_a_bad_digest_is_refused(tmp_path: Path) -> None:
    bases = Bases(cast(ImageStore, StoreWith()), tmp_path)
    assert bases.path(KEPT) == tmp_path / f"sha256-{'a' * 64}"
    for bad in ("../etc", "sha256:../../x", "sha256:"):
        try:
            bases.path(bad)
        except ValueError:
            continue
        raise AssertionError(f"{bad!r} accepted")
    assert bases.prune() == []  # no directory yet: nothing to do
