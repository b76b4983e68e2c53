"""A container's root as an overlay on a shared, id-mapped image tree (overlay.py), on
this kernel and with the real runc, as root: the pod's root owns the image's files
without a copy, what a container writes stays its own, and the shared tree is never
changed."""

from __future__ import annotations

import os
import tempfile
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from tests.integration.oci import busybox_rootfs
from tests.integration.oci.pods import RuncPod, log_has, remove_work, wait_for
from vkpy.oci.runtime import overlay

pytestmark = pytest.mark.skipif(
    os.geteuid() != 0, reason="mounts and user namespaces need root here"
)


@pytest.fixture
async def pod() -> AsyncIterator[RuncPod]:
    work = Path(tempfile.mkdtemp(prefix="vkpy-overlay-"))
    work.chmod(0o711)
    made = RuncPod(work)
    try:
        await made.start_sandbox()
        yield made
    finally:
        await made.cleanup()
        for place in work.glob("*/root"):
            overlay.unmount(place)
        remove_work(work)


def layered(pod: RuncPod, name: str, image: Path, userns: str) -> Path:
    """A container root `name` on `image` (the pod's root owns its top directory)."""
    parts = {part: pod.work / name / part for part in ("root", "upper", "work")}
    for part in parts.values():
        part.mkdir(parents=True)
    os.chown(parts["upper"], pod.id_base, pod.id_base)
    parts["upper"].chmod(0o755)
    overlay.mount(image, parts["upper"], parts["work"], parts["root"], userns)
    return parts["root"]


async def test_two_containers_share_one_image_tree_mapped_to_their_pod(pod: RuncPod) -> None:
    assert overlay.supported(pod.work / "check")
    image = busybox_rootfs.build(pod.work / "image", 0)  # the image's own ids
    userns = (await pod.sandbox.namespaces())["user"]
    first = layered(pod, "first", image, userns)
    second = layered(pod, "second", image, userns)
    assert overlay.is_mount(first) and overlay.is_mount(second)
    # The host sees the image's root-owned files as the pod's root, with no copy.
    assert os.stat(first / "bin" / "busybox").st_uid == pod.id_base
    assert os.stat(image / "bin" / "busybox").st_uid == 0

    script = "id -u; echo changed >> /etc/passwd; echo mine > /data/note; cat /etc/passwd"
    _, log = await pod.run("writer", f"{script}; echo done", rootfs=str(first))
    await wait_for(log_has(log, "done"))
    out = log.read_text().splitlines()
    assert out[0] == "0"
    assert "changed" in out
    # The writes are the first container's: its upper layer, as the pod's root.
    assert (pod.work / "first" / "upper" / "data" / "note").read_text() == "mine\n"
    assert os.stat(pod.work / "first" / "upper" / "data" / "note").st_uid == pod.id_base
    assert "changed" not in (image / "etc" / "passwd").read_text()
    assert not (image / "data" / "note").exists()

    _, other = await pod.run(
        "reader", "cat /data/note 2>&1; grep -c changed /etc/passwd; echo done", rootfs=str(second)
    )
    await wait_for(log_has(other, "done"))
    seen = other.read_text()
    assert "mine" not in seen
    assert seen.splitlines()[1] == "0"

    await pod.cleanup()
    overlay.unmount(first)
    assert not overlay.is_mount(first)
    assert overlay.is_mount(second)


async def test_a_path_with_nothing_mounted_is_not_a_mount(tmp_path: Path) -> None:
    assert not overlay.is_mount(tmp_path)
    overlay.unmount(tmp_path)  # nothing to do, no error
    assert overlay.is_mount(Path("/"))
