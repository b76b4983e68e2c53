"""Image garbage collection on a `runtime: oci` node, every 5 minutes as the kubelet's.

The kubelet's image GC manager looks at the image filesystem every 5 minutes and,
at or above `imageGCHighThresholdPercent` (85), removes images least recently used
first down to `imageGCLowThresholdPercent` (80). vkpy.oci.images.gc decides and
removes; this module runs it on the node's store on that schedule, with the images
the node's pods name (every container's image, init and ephemeral ones too, and the
digests they run) as in use: those are never removed, whatever the disk. The clock
is injected, so the schedule is tested without waiting. A failed round is logged and
the next one runs as planned.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Iterable
from pathlib import Path

from vkpy.core.clock import Clock
from vkpy.oci.images import gc
from vkpy.oci.images.errors import ImageError
from vkpy.oci.images.store import ImageStore, StoredImage
from vkpy.providers.base import PodConfig

log = logging.getLogger(__name__)

PERIOD = 300.0
"""Seconds between two looks (the kubelet's ImageGCPeriod)."""


def images_of(pods: Iterable[PodConfig]) -> list[str]:
    """The images the pods' containers name (init, app and ephemeral ones)."""
    return [
        container.image
        for pod in pods
        for container in (*pod.init_containers, *pod.containers, *pod.ephemeral_containers)
    ]


class ImageGc:
    """`run()` until cancelled: a look every `period` seconds of `clock`."""

    def __init__(
        self,
        store: ImageStore,
        in_use: Callable[[], Iterable[str]],
        clock: Clock,
        policy: gc.GcPolicy | None = None,
        measure: Callable[[Path], gc.DiskUsage] = gc.disk_usage,
        period: float = PERIOD,
        after_removal: Callable[[], object] = lambda: None,
    ) -> None:
        self.store = store
        self.after_removal = after_removal
        """Run (in a thread) once images were removed: the node's unpacked trees of
        them go too (OciNode.prune_trees), else the disk would not come back."""
        self.in_use = in_use
        self.clock = clock
        self.policy = policy or gc.GcPolicy()
        self.measure = measure
        self.period = period
        self.rounds = 0
        """Looks taken so far (for checks and tests)."""

    async def run(self) -> None:
        while True:
            await self.clock.sleep(self.period)
            await self.once()

    async def once(self) -> list[StoredImage]:
        """One look: the images removed (none below the high threshold). It counts
        in `rounds` once it is over, the unpacked trees' clean-up included."""
        try:
            return await self._look()
        finally:
            self.rounds += 1

    async def _look(self) -> list[StoredImage]:
        try:
            removed = await gc.collect(self.store, list(self.in_use()), self.policy, self.measure)
        except (OSError, ImageError) as error:
            log.warning("image garbage collection failed", extra={"error": str(error)})
            return []
        for image in removed:
            log.info(
                "unused image removed",
                extra={"image": ", ".join(image.refs), "bytes": image.size},
            )
        if removed:
            try:
                await asyncio.to_thread(self.after_removal)
            except OSError as error:
                log.warning("cannot remove unpacked images", extra={"error": str(error)})
        return removed
