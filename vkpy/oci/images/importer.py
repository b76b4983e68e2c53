"""Images into the store without a registry, for air-gapped nodes (as `kind load`).

Takes what `docker save`/`podman save` (docker-archive) or `skopeo copy ...
oci-archive:` / `buildah push` (OCI layout tarball) write, and copies each image it
names into the store with skopeo, under its normalised reference. The names come
from the archive (docker-archive's RepoTags; an OCI index's
`io.containerd.image.name` or a full `org.opencontainers.image.ref.name`) or, for an
unnamed or bare-tag image, from `--name`.
"""

from __future__ import annotations

import json
import tarfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from vkpy.oci.images import tools
from vkpy.oci.images.errors import ImageToolError, InvalidImageName
from vkpy.oci.images.reference import parse
from vkpy.oci.images.store import REF_NAME, ImageStore

CONTAINERD_NAME = "io.containerd.image.name"


@dataclass(frozen=True)
class ArchiveImage:
    source: str  # skopeo's source reference into the archive
    ref: str  # normalised reference it is stored under


def images_in(path: Path, name: str | None = None) -> list[ArchiveImage]:
    """What `path` holds and where each image goes; ImageToolError if it holds none."""
    try:
        with tarfile.open(path) as tar:
            members = set(tar.getnames())
            if "oci-layout" in members and "index.json" in members:
                return _oci(path, _json(tar, "index.json"), name)
            if "manifest.json" in members:
                return _docker(path, _json(tar, "manifest.json"), name)
    except (OSError, tarfile.TarError) as error:
        raise ImageToolError(f"{path}: not a readable tar archive ({error})") from error
    raise ImageToolError(f"{path}: neither an OCI layout nor a docker-archive tarball")


def _json(tar: tarfile.TarFile, member: str) -> Any:
    file = tar.extractfile(member)
    if file is None:
        raise ImageToolError(f"{member} in the archive is not a file")
    try:
        return json.load(file)
    except ValueError as error:
        raise ImageToolError(f"{member} in the archive is not JSON") from error


def _name(candidate: str | None, name: str | None, what: str) -> str:
    chosen = name or candidate
    if not chosen:
        raise ImageToolError(f"{what} has no name: give one with --name REF")
    try:
        return str(parse(chosen))
    except InvalidImageName as error:
        raise ImageToolError(f"{what}: {error}") from error


def _oci(path: Path, index: dict[str, Any], name: str | None) -> list[ArchiveImage]:
    manifests = index.get("manifests") or []
    found = []
    for descriptor in manifests:
        annotations = descriptor.get("annotations") or {}
        ref_name = annotations.get(REF_NAME)
        full = annotations.get(CONTAINERD_NAME)
        if full is None and ref_name and ("/" in ref_name or ":" in ref_name):
            full = ref_name
        if full is None and ref_name and name:
            full = f"{name}:{ref_name}"  # a bare tag: --name is the repository
            name = None
        if ref_name:
            source = f"oci-archive:{path}:{ref_name}"
        elif len(manifests) == 1:
            source = f"oci-archive:{path}"
        else:
            raise ImageToolError(f"{path}: an unnamed image among several")
        found.append(ArchiveImage(source, _name(full, name, f"{path} ({ref_name or 'unnamed'})")))
    if not found:
        raise ImageToolError(f"{path}: the OCI index lists no image")
    return found


def _docker(path: Path, manifest: list[dict[str, Any]], name: str | None) -> list[ArchiveImage]:
    found = []
    for position, entry in enumerate(manifest):
        tags = entry.get("RepoTags") or []
        if name or not tags:
            found.append(
                ArchiveImage(f"docker-archive:{path}:@{position}", _name(None, name, str(path)))
            )
            continue
        for tag in tags:
            found.append(ArchiveImage(f"docker-archive:{path}:{tag}", _name(tag, None, str(path))))
    if not found:
        raise ImageToolError(f"{path}: the docker archive lists no image")
    return found


async def import_archive(store: ImageStore, path: Path, name: str | None = None) -> list[str]:
    """Copy every image of the archive into `store`; the references stored."""
    stored = []
    for image in images_in(path, name):
        result = await tools.run(
            [
                store.tools.skopeo,
                "--policy",
                str(store.policy),
                "--tmpdir",
                str(store.tmp),
                "copy",
                "--quiet",
                image.source,
                f"oci:{store.layout_ref(image.ref)}",
            ],
            lock=store.lock,
            env=tools.isolated_env(store.home),
        )
        if result.returncode != 0:
            raise ImageToolError(f"importing {image.ref} from {path}: {result.last_error()}")
        digest = store.index()[image.ref]["digest"]
        store.record(image.ref, f"{parse(image.ref).name}@{digest}")
        stored.append(image.ref)
    return stored
