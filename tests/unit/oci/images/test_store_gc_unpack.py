"""The real store: image GC removes an unused image and keeps a used one; a pod's
root filesystem unpacked with an id map, and removed."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from tests.registry import Registry
from vkpy.oci.images import registries
from vkpy.oci.images.errors import ImageNotFound, ImageToolError
from vkpy.oci.images.gc import DiskUsage, collect
from vkpy.oci.images.pull import Puller
from vkpy.oci.images.store import ImageStore
from vkpy.oci.images.unpack import IdMap, remove_rootfs, unpack


def puller(store: ImageStore, registry: Registry) -> Puller:
    return Puller(store, registries.from_config({registry.host: {"insecure": True}}))


def blobs_of(store: ImageStore, manifest_digest: str) -> list[Path]:
    manifest = store.manifest(manifest_digest)
    digests = [manifest_digest, manifest["config"]["digest"]]
    digests += [layer["digest"] for layer in manifest["layers"]]
    return [store.blob_path(d) for d in digests]


async def test_gc_removes_the_unused_image_and_keeps_the_used_one(
    store: ImageStore, registry: Registry, busybox: Path, busybox_other: Path
) -> None:
    registry.push(busybox, "library/used:1")
    registry.push(busybox_other, "library/unused:1")
    pull = puller(store, registry)
    used = await pull.ensure(f"{registry.host}/library/used:1")
    unused = await pull.ensure(f"{registry.host}/library/unused:1")
    unused_only = set(blobs_of(store, unused.image.manifest_digest)) - set(
        blobs_of(store, used.image.manifest_digest)
    )
    assert unused_only and all(p.exists() for p in unused_only)

    def full(path: Path) -> DiskUsage:
        assert path == store.root
        return DiskUsage(total=100 * 2**30, used=99 * 2**30)  # the disk is full

    # The used image is older (pulled first), so least recently used: kept only
    # because a container uses it.
    removed = await collect(store, [f"{registry.host}/library/used:1"], measure=full)
    assert [i.refs for i in removed] == [
        (f"{registry.host}/library/unused:1", unused.image.image_id)
    ]
    assert [i.refs for i in store.images()] == [
        (f"{registry.host}/library/used:1", used.image.image_id)
    ]
    assert not any(p.exists() for p in unused_only)  # its blobs are gone from disk
    assert all(p.exists() for p in blobs_of(store, used.image.manifest_digest))
    rootfs = await unpack(store, f"{registry.host}/library/used:1", store.root.parent / "pod")
    assert (rootfs / "bin/busybox").is_file()  # what is kept still unpacks

    def roomy(_: Path) -> DiskUsage:
        return DiskUsage(total=100, used=84)

    assert await collect(store, [], measure=roomy) == []  # below 85 %: nothing goes
    assert len(store.images()) == 1


async def test_unpack_with_an_id_map(store: ImageStore, registry: Registry, tmp_path: Path) -> None:
    image = f"{registry.host}/library/busybox:1.35"
    await puller(store, registry).ensure(image)
    assert os.geteuid() == 0, "an id map needs root: run these tests as root"
    rootfs = await unpack(store, image, tmp_path / "pod-a/rootfs", IdMap(0, 300000, 65536))
    for path in ("bin", "bin/busybox", "etc/passwd"):
        stat = (rootfs / path).lstat()
        assert (stat.st_uid, stat.st_gid) == (300000, 300000), path
    assert (rootfs / "bin/sh").readlink() == Path("busybox")
    assert "nobody:x:65534" in (rootfs / "etc/passwd").read_text()
    with pytest.raises(ImageToolError, match="exists"):
        await unpack(store, image, rootfs)
    other = await unpack(store, image, tmp_path / "pod-b/rootfs", IdMap(0, 400000, 65536))
    assert (other / "bin/busybox").stat().st_uid == 400000  # each pod its own owner
    (rootfs / "etc").chmod(0o500)
    remove_rootfs(rootfs)
    assert not rootfs.exists()
    assert (other / "bin/busybox").exists()


async def test_unpack_whiteouts(store: ImageStore, registry: Registry, tmp_path: Path) -> None:
    from tests.registry import busybox_layout_without  # noqa: PLC0415

    registry.push(busybox_layout_without("etc/group"), "library/whiteout:1")
    image = f"{registry.host}/library/whiteout:1"
    result = await puller(store, registry).ensure(image)
    assert len(store.manifest(result.image.manifest_digest)["layers"]) == 2
    rootfs = await unpack(store, image, tmp_path / "rootfs")
    assert (rootfs / "etc/passwd").exists()
    assert not (rootfs / "etc/group").exists()  # deleted by the upper layer's whiteout
    assert not list(rootfs.rglob(".wh.*"))


async def test_unpack_of_a_missing_image(store: ImageStore, tmp_path: Path) -> None:
    with pytest.raises(ImageNotFound):
        await unpack(store, "busybox:never-pulled", tmp_path / "rootfs")
    assert not (tmp_path / "rootfs").exists()


async def test_a_stored_blob_that_does_not_match_its_digest_does_not_unpack(
    store: ImageStore, registry: Registry, busybox_other: Path, tmp_path: Path
) -> None:
    image = f"{registry.host}/library/busybox:1.35"
    result = await puller(store, registry).ensure(image)
    layer = store.blob_path(store.manifest(result.image.manifest_digest)["layers"][0]["digest"])
    # A valid layer, but another one: only the digest check can tell.
    other_manifest = json.loads((busybox_other / "index.json").read_text())["manifests"][0]
    other = json.loads((busybox_other / "blobs/sha256" / other_manifest["digest"][7:]).read_text())
    layer.write_bytes(
        (busybox_other / "blobs/sha256" / other["layers"][0]["digest"][7:]).read_bytes()
    )
    with pytest.raises(ImageToolError, match="digest mismatch"):
        await unpack(store, image, tmp_path / "rootfs")
    assert not (tmp_path / "rootfs").exists()


async def test_gc_keeps_the_image_a_pod_runs_after_its_tag_moved(
    store: ImageStore, registry: Registry, busybox: Path, busybox_other: Path, tmp_path: Path
) -> None:
    pull = puller(store, registry)
    registry.push(busybox, "library/app:latest")
    running = await pull.ensure(f"{registry.host}/library/app")  # a pod runs this one
    registry.push(busybox_other, "library/app:latest")
    newer = await pull.ensure(f"{registry.host}/library/app")  # the tag moved on
    assert newer.image.manifest_digest != running.image.manifest_digest

    def full(_: Path) -> DiskUsage:
        return DiskUsage(total=100, used=99)

    removed = await collect(store, [running.image.image_id], measure=full)
    assert [i.manifest_digest for i in removed] == [newer.image.manifest_digest]
    [kept] = store.images()
    assert kept.manifest_digest == running.image.manifest_digest
    rootfs = await unpack(store, running.image.image_id, tmp_path / "restarted")
    assert not (rootfs / "etc/variant").exists()  # the first image, not the other
    assert [i.manifest_digest for i in await collect(store, [], measure=full)] == [
        running.image.manifest_digest
    ]
    assert store.images() == []
