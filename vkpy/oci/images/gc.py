"""Image garbage collection, as the kubelet's image GC manager decides it.

When the store's filesystem is at or above the high threshold (85 % by default),
images are removed, least recently used first, until usage would be at the low
threshold (80 %). An image any container uses (the caller passes the references or
image ids in use) is never removed. `plan` is the decision, pure; `collect` measures
the disk, plans and removes from the store.
"""

from __future__ import annotations

import contextlib
import shutil
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path

from vkpy.oci.images.errors import InvalidImageName
from vkpy.oci.images.reference import parse
from vkpy.oci.images.store import ImageStore, StoredImage


@dataclass(frozen=True)
class DiskUsage:
    total: int
    used: int

    @property
    def percent(self) -> float:
        return 100.0 * self.used / self.total if self.total else 0.0


@dataclass(frozen=True)
class GcPolicy:
    high_percent: float = 85.0  # imageGCHighThresholdPercent
    low_percent: float = 80.0  # imageGCLowThresholdPercent

    def __post_init__(self) -> None:
        if not 0 <= self.low_percent <= self.high_percent <= 100:
            raise ValueError("image GC thresholds need 0 <= low <= high <= 100")


def in_use_keys(in_use: Iterable[str]) -> set[str]:
    """References as pods write them, normalised, and image ids as they are."""
    keys = set()
    for item in in_use:
        keys.add(item)
        with contextlib.suppress(InvalidImageName):
            keys.add(str(parse(item)))
    return keys


def is_in_use(image: StoredImage, keys: set[str]) -> bool:
    names = {*image.refs, *image.repo_digests, image.manifest_digest}
    return not names.isdisjoint(keys)


def plan(
    images: Iterable[StoredImage], in_use: Iterable[str], disk: DiskUsage, policy: GcPolicy
) -> list[StoredImage]:
    """The images to remove, in order; none below the high threshold."""
    if disk.percent < policy.high_percent:
        return []
    to_free = disk.used - disk.total * policy.low_percent / 100.0
    keys = in_use_keys(in_use)
    chosen: list[StoredImage] = []
    freed = 0
    for image in sorted(images, key=lambda i: (i.last_used, i.manifest_digest)):
        if freed >= to_free:
            break
        if is_in_use(image, keys):
            continue
        chosen.append(image)
        freed += image.size
    return chosen


def disk_usage(path: Path) -> DiskUsage:
    usage = shutil.disk_usage(path)
    return DiskUsage(total=usage.total, used=usage.total - usage.free)


async def collect(
    store: ImageStore,
    in_use: Iterable[str],
    policy: GcPolicy | None = None,
    measure: Callable[[Path], DiskUsage] = disk_usage,
) -> list[StoredImage]:
    """Remove what `plan` chooses from `store`; returns what was removed."""
    chosen = plan(store.images(), in_use, measure(store.root), policy or GcPolicy())
    if chosen:
        await store.remove(ref for image in chosen for ref in image.refs)
    return chosen
