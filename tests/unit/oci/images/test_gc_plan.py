"""Image GC decisions: the kubelet's 85/80 % thresholds, least recently used first,
never an image in use."""

from __future__ import annotations

import pytest

from vkpy.oci.images.gc import DiskUsage, GcPolicy, plan
from vkpy.oci.images.store import StoredImage

GB = 1_000_000_000


def image(name: str, size: int, last_used: float) -> StoredImage:
    digest = "sha256:" + name.encode().hex().ljust(64, "0")
    return StoredImage(
        manifest_digest=digest,
        refs=(f"docker.io/library/{name}:latest",),
        repo_digests=(f"docker.io/library/{name}@{digest}",),
        size=size,
        last_used=last_used,
    )


IMAGES = [image("old", 2 * GB, 100), image("mid", 3 * GB, 200), image("new", 4 * GB, 300)]


def names(chosen: list[StoredImage]) -> list[str]:
    return [i.refs[0].split("/")[-1].split(":")[0] for i in chosen]


def test_nothing_below_the_high_threshold() -> None:
    assert plan(IMAGES, [], DiskUsage(100 * GB, 84 * GB), GcPolicy()) == []


def test_least_recently_used_first_down_to_the_low_threshold() -> None:
    # 86 % used: 6 GB must go to reach 80 %: old (2) + mid (3) is 5, then new (4).
    assert names(plan(IMAGES, [], DiskUsage(100 * GB, 86 * GB), GcPolicy())) == [
        "old",
        "mid",
        "new",
    ]
    # 85 %: 5 GB, old + mid are enough.
    assert names(plan(IMAGES, [], DiskUsage(100 * GB, 85 * GB), GcPolicy())) == ["old", "mid"]


def test_images_in_use_are_kept_however_full_the_disk() -> None:
    disk = DiskUsage(100 * GB, 99 * GB)
    assert names(plan(IMAGES, ["old"], disk, GcPolicy())) == ["mid", "new"]  # short name
    by_id = IMAGES[1].repo_digests[0]
    assert names(plan(IMAGES, [by_id, "docker.io/library/new:latest"], disk, GcPolicy())) == ["old"]


def test_thresholds_are_settable_and_checked() -> None:
    assert names(plan(IMAGES, [], DiskUsage(100 * GB, 50 * GB), GcPolicy(50, 48))) == ["old"]
    with pytest.raises(ValueError, match="thresholds"):
        GcPolicy(80, 85)
