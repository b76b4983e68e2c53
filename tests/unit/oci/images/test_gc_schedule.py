"""Image GC on a `runtime: oci` node's schedule (ocigc.py), on the real store: nothing
before the kubelet's 5 minutes, then the unused image goes and the used one stays;
a later look removes it once no pod names it. Time is a fake clock; the store, the
registry and the tools removing blobs are real."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from pathlib import Path

from tests.registry import Registry
from tests.unit.fake_clock import FakeClock
from vkpy.oci.images import registries
from vkpy.oci.images.gc import DiskUsage
from vkpy.oci.images.pull import Puller
from vkpy.oci.images.store import ImageStore
from vkpy.providers.base import ContainerConfig, PodConfig, PodRef
from vkpy.providers.process.ocigc import ImageGc, images_of


def full(_: Path) -> DiskUsage:
    return DiskUsage(total=100 * 2**30, used=99 * 2**30)


def pod_using(image: str) -> PodConfig:
    return PodConfig(
        ref=PodRef("default", "web", "uid-1"),
        pod={},
        init_containers=(),
        containers=(ContainerConfig(name="app", image=image, command=(), args=()),),
        volumes=(),
    )


async def until(what: str, check: Callable[[], bool], timeout: float = 30.0) -> None:
    async with asyncio.timeout(timeout):
        while not check():
            await asyncio.sleep(0.05)


async def test_every_five_minutes_the_unused_image_goes_and_a_used_one_stays(
    store: ImageStore, registry: Registry, busybox: Path, busybox_other: Path
) -> None:
    registry.push(busybox, "library/kept:1")
    registry.push(busybox_other, "library/dropped:1")
    pull = Puller(store, registries.from_config({registry.host: {"insecure": True}}))
    kept, dropped = f"{registry.host}/library/kept:1", f"{registry.host}/library/dropped:1"
    await pull.ensure(kept)
    await pull.ensure(dropped)
    pods = [pod_using(kept)]
    clock = FakeClock()
    pruned: list[int] = []  # the unpacked trees' clean-up, after each removal

    def prune() -> None:
        # A slow clean-up (a big tree on a busy disk): a look is counted only once
        # it is done, so a check of `rounds` sees the trees gone too.
        time.sleep(0.3)
        pruned.append(len(store.images()))

    collector = ImageGc(
        store,
        lambda: images_of(pods),
        clock,
        measure=full,
        after_removal=prune,
    )
    task = asyncio.create_task(collector.run())
    try:
        await clock.advance(299)
        assert collector.rounds == 0
        assert len(store.images()) == 2
        await clock.advance(1)
        await until("a look", lambda: collector.rounds == 1)
        assert [image.refs[0] for image in store.images()] == [kept]
        assert pruned == [1]  # after the removal, with the kept image still stored
        pods.clear()  # the pod is gone: its image is unused now
        await clock.advance(299)
        assert collector.rounds == 1 and len(store.images()) == 1
        await clock.advance(1)
        await until("a second look", lambda: collector.rounds == 2)
        assert store.images() == []
        assert pruned == [1, 0]
    finally:
        task.cancel()
