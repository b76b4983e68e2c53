"""Pulls against a real registry (Debian's docker-registry on loopback) with skopeo
into a real store: by tag and digest, the three pull policies, pull secrets, a
mirror, a corrupted blob, two pulls at once."""

from __future__ import annotations

import asyncio
import base64
import contextlib
import json
import os
from pathlib import Path
from typing import Any

import pytest

from tests.registry import Registry
from tests.unit.oci.images.conftest import AUTH_PASSWORD, AUTH_USER
from vkpy.oci.images import registries
from vkpy.oci.images.credentials import keyring_from_secrets
from vkpy.oci.images.errors import ImageNeverPullError, ImagePullError
from vkpy.oci.images.pull import Platform, Puller
from vkpy.oci.images.store import ImageStore


def puller(store: ImageStore, *hosts: Registry, **mirrors: list[str]) -> Puller:
    config: dict[str, Any] = {r.host: {"insecure": True} for r in hosts}
    for host, urls in mirrors.items():
        config[host.replace("_", ".")] = {"mirrors": urls}
    return Puller(store, registries.from_config(config))


def blob_gets(registry: Registry) -> list[str]:
    return [r for r in registry.requests() if r.startswith("GET") and "/blobs/" in r]


async def test_pull_by_tag(store: ImageStore, registry: Registry, busybox: Path) -> None:
    pushed = registry.push(busybox, "library/busybox:by-tag")
    result = await puller(store, registry).ensure(f"{registry.host}/library/busybox:by-tag")
    assert result.pulled
    assert result.image.image_id == f"{registry.host}/library/busybox@{pushed}"
    assert result.image.manifest_digest == pushed
    assert result.image.refs == (  # the tag, and the digest that stays when the tag moves
        f"{registry.host}/library/busybox:by-tag",
        f"{registry.host}/library/busybox@{pushed}",
    )
    assert result.size == result.image.size > 1_000_000  # busybox is about 1 MB compressed
    assert 0 < result.seconds <= result.with_waiting
    assert result.asked_registry
    config = store.config(f"{registry.host}/library/busybox:by-tag")
    assert (config.cmd, config.env, config.architecture) == (("sh",), ("PATH=/bin",), "amd64")
    for layer in store.manifest(pushed)["layers"]:
        assert store.blob_path(layer["digest"]).is_file()


async def test_pull_by_digest(store: ImageStore, registry: Registry, busybox: Path) -> None:
    pushed = registry.push(busybox, "library/busybox:by-digest")
    image = f"{registry.host}/library/busybox@{pushed}"
    result = await puller(store, registry).ensure(image)
    assert result.pulled
    assert result.image.refs == (image,)
    assert result.image.image_id == image


async def test_if_not_present_does_not_contact_the_registry(
    store: ImageStore, registry: Registry
) -> None:
    image = f"{registry.host}/library/busybox:1.35"
    pull = puller(store, registry)
    assert (await pull.ensure(image, "IfNotPresent")).pulled
    before = len(registry.requests())
    again = await pull.ensure(image, "IfNotPresent")
    assert not again.pulled
    assert not again.asked_registry
    assert len(registry.requests()) == before
    assert (await pull.ensure(image)).pulled is False  # a tag other than latest: IfNotPresent
    assert len(registry.requests()) == before


async def test_always_asks_the_registry_but_copies_nothing_it_has(
    store: ImageStore, registry: Registry, busybox: Path, busybox_other: Path
) -> None:
    pull = puller(store, registry)
    registry.push(busybox, "library/moving:latest")
    first = await pull.ensure(f"{registry.host}/library/moving")  # :latest → Always
    before, blobs = len(registry.requests()), len(blob_gets(registry))
    same = await pull.ensure(f"{registry.host}/library/moving")
    assert not same.pulled
    assert same.asked_registry
    assert len(registry.requests()) > before  # asked which digest the tag names now
    assert len(blob_gets(registry)) == blobs  # and fetched no blob
    moved = registry.push(busybox_other, "library/moving:latest")
    changed = await pull.ensure(f"{registry.host}/library/moving", "Always")
    assert changed.pulled
    assert changed.image.manifest_digest == moved != first.image.manifest_digest
    assert store.lookup(f"{registry.host}/library/moving:latest") == changed.image
    old = store.lookup(first.image.image_id)  # the image before the move, by its imageID
    assert old is not None
    assert old.manifest_digest == first.image.manifest_digest
    assert old.refs == (first.image.image_id,)


async def test_never(store: ImageStore, registry: Registry) -> None:
    image = f"{registry.host}/library/busybox:1.35"
    pull = puller(store, registry)
    before = len(registry.requests())
    with pytest.raises(ImageNeverPullError) as caught:
        await pull.ensure(image, "Never")
    assert caught.value.reason == "ErrImageNeverPull"
    assert "is not present with pull policy of Never" in str(caught.value)
    assert len(registry.requests()) == before
    await pull.ensure(image)
    assert not (await pull.ensure(image, "Never")).pulled


async def test_missing_image_is_err_image_pull(store: ImageStore, registry: Registry) -> None:
    with pytest.raises(ImagePullError) as caught:
        await puller(store, registry).ensure(f"{registry.host}/library/nothing:1")
    assert caught.value.reason == "ErrImagePull"
    assert "manifest unknown" in str(caught.value)
    assert store.images() == []


def pull_secret(host: str, user: str, password: str) -> dict[str, Any]:
    auth = base64.b64encode(f"{user}:{password}".encode()).decode()
    config = json.dumps({"auths": {host: {"auth": auth}}})
    return {
        "metadata": {"name": "regcred"},
        "type": "kubernetes.io/dockerconfigjson",
        "data": {".dockerconfigjson": base64.b64encode(config.encode()).decode()},
    }


async def test_pull_secret(store: ImageStore, auth_registry: Registry) -> None:
    image = f"{auth_registry.host}/team/busybox:1.35"
    pull = puller(store, auth_registry)
    with pytest.raises(ImagePullError) as refused:
        await pull.ensure(image)
    assert "unauthorized" in str(refused.value).lower()
    wrong = keyring_from_secrets([pull_secret(auth_registry.host, AUTH_USER, "wrong")])
    with pytest.raises(ImagePullError) as wrong_refused:
        await pull.ensure(image, keyring=wrong)
    assert "wrong" not in str(wrong_refused.value)
    assert store.images() == []
    keyring = keyring_from_secrets([pull_secret(auth_registry.host, AUTH_USER, AUTH_PASSWORD)])
    result = await pull.ensure(image, keyring=keyring)
    assert result.pulled
    assert image in result.image.refs
    assert store.layout.stat().st_mode & 0o077 == 0  # host users cannot read private images
    leftovers = [p for p in store.root.rglob("*") if p.is_file() and p.stat().st_size < 4096]
    for path in leftovers:  # the password is in no file the pull left behind
        assert AUTH_PASSWORD.encode() not in path.read_bytes(), path


async def test_mirror_serves_a_host(store: ImageStore, registry: Registry, busybox: Path) -> None:
    registry.push(busybox, "library/busybox:mirrored")
    before = len(registry.requests())
    pull = puller(store, registry, docker_io=[f"http://{registry.host}"])
    result = await pull.ensure("busybox:mirrored")  # docker.io/library/busybox:mirrored
    assert result.pulled
    assert result.image.image_id.startswith("docker.io/library/busybox@sha256:")
    assert result.image.refs == ("docker.io/library/busybox:mirrored", result.image.image_id)
    assert any("/v2/library/busybox/manifests/" in r for r in registry.requests()[before:])


async def test_corrupted_blob_is_rejected(
    store: ImageStore, registry: Registry, tmp_path: Path
) -> None:
    from tests.registry import busybox_layout  # noqa: PLC0415

    layout = busybox_layout("corrupted-on-purpose")
    pushed = registry.push(layout, "library/corrupt:1")
    manifest = json.loads(registry.blob_file(pushed).read_bytes())
    layer = registry.blob_file(manifest["layers"][0]["digest"])
    data = bytearray(layer.read_bytes())
    data[len(data) // 2] ^= 0xFF  # same size, one byte different
    layer.write_bytes(bytes(data))
    with pytest.raises(ImagePullError) as caught:
        await puller(store, registry).ensure(f"{registry.host}/library/corrupt:1")
    assert "Digest did not match" in str(caught.value)
    assert store.lookup(f"{registry.host}/library/corrupt:1") is None


async def test_two_pulls_at_once_both_land(
    store: ImageStore, registry: Registry, busybox: Path, busybox_other: Path
) -> None:
    registry.push(busybox, "library/one:1")
    registry.push(busybox_other, "library/two:1")
    pull = puller(store, registry)
    one, two = await asyncio.gather(
        pull.ensure(f"{registry.host}/library/one:1"), pull.ensure(f"{registry.host}/library/two:1")
    )
    assert {r for i in store.images() for r in i.refs} == {
        f"{registry.host}/library/one:1",
        f"{registry.host}/library/two:1",
        one.image.image_id,
        two.image.image_id,
    }
    assert one.image.manifest_digest != two.image.manifest_digest
    waited = max(r.with_waiting - r.seconds for r in (one, two))
    assert waited > 0.02  # one at a time: the second waited for the first
    assert os.listdir(store.tmp) == []  # no auth file, digest file or download left


async def test_multi_arch_index_resolved_to_the_node_platform(
    tmp_path: Path, registry: Registry, busybox: Path, busybox_other: Path
) -> None:
    from tests.registry import multi_arch_layout  # noqa: PLC0415

    index_digest = registry.push(multi_arch_layout(busybox, busybox_other), "library/multi:1")
    index = json.loads(registry.blob_file(index_digest).read_bytes())
    by_arch = {m["platform"]["architecture"]: m["digest"] for m in index["manifests"]}
    image = f"{registry.host}/library/multi:1"
    conf = registries.from_config({registry.host: {"insecure": True}})
    for arch in ("amd64", "arm64"):
        store = ImageStore(tmp_path / arch)
        result = await Puller(store, conf, Platform("linux", arch)).ensure(image)
        assert result.image.manifest_digest == by_arch[arch]
        assert store.config(image).architecture == arch
        assert result.image.image_id == f"{registry.host}/library/multi@{index_digest}"
    assert by_arch["amd64"] != by_arch["arm64"]
    with pytest.raises(ImagePullError, match=r"no image found in (image index|manifest list)"):
        await Puller(ImageStore(tmp_path / "s390x"), conf, Platform("linux", "s390x")).ensure(image)


async def test_a_cancelled_pull_leaves_no_skopeo_and_no_lock(
    store: ImageStore, registry: Registry
) -> None:
    from tests.processes import running_with  # noqa: PLC0415

    stop = asyncio.Event()

    async def silent(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.read(65536)  # a registry that never answers
        await stop.wait()
        writer.close()

    server = await asyncio.start_server(silent, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    try:
        hung = Puller(store, registries.from_config({f"127.0.0.1:{port}": {"insecure": True}}))
        by_digest = f"127.0.0.1:{port}/library/busybox@sha256:{'0' * 64}"  # copied under the lock
        task = asyncio.create_task(hung.ensure(by_digest))
        await asyncio.sleep(1.0)
        assert running_with(str(store.root)), "skopeo should be waiting on the silent registry"
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        assert running_with(str(store.root)) == []
        async with asyncio.timeout(30):
            result = await puller(store, registry).ensure(f"{registry.host}/library/busybox:1.35")
        assert result.pulled
    finally:
        stop.set()
        server.close()
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(5):
                await server.wait_closed()
