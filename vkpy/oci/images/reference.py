"""Image references read as the kubelet reads them.

The kubelet (and containerd's CRI) normalise what a pod spec says with the rules of
Docker's reference grammar: a first component without a `.` or `:` (and not
`localhost`) is a Docker Hub repository, so `busybox` is
`docker.io/library/busybox:latest` and `me/app` is `docker.io/me/app:latest`;
`index.docker.io` is `docker.io`; repositories are lowercase; no tag and no digest
means `:latest`; a digest pins the content whatever the tag says. The API server
defaults `imagePullPolicy` from the tag: `:latest` (or no tag) is `Always`, anything
else `IfNotPresent`.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from vkpy.oci.images.errors import InvalidImageName

DOCKER_HUB = "docker.io"
_LEGACY_HUB = "index.docker.io"
DEFAULT_TAG = "latest"
MAX_NAME = 255

_DOMAIN_PART = r"(?:[a-zA-Z0-9]|[a-zA-Z0-9][a-zA-Z0-9-]*[a-zA-Z0-9])"
_DOMAIN = re.compile(rf"(?:{_DOMAIN_PART}(?:\.{_DOMAIN_PART})*|\[[0-9a-fA-F:]+\])(?::[0-9]+)?")
_PATH_COMPONENT = re.compile(r"[a-z0-9]+(?:(?:[._]|__|[-]+)[a-z0-9]+)*")
_TAG = re.compile(r"[\w][\w.-]{0,127}")
_DIGEST = re.compile(r"[A-Za-z][A-Za-z0-9]*(?:[-_+.][A-Za-z][A-Za-z0-9]*)*:[0-9a-fA-F]{32,}")
_SHA256 = re.compile(r"sha256:[0-9a-f]{64}")


@dataclass(frozen=True)
class ImageReference:
    """A normalised reference: `registry/repository[:tag][@digest]`."""

    registry: str
    repository: str
    tag: str | None
    digest: str | None

    @property
    def name(self) -> str:
        """`registry/repository`, what credentials and repository digests are for."""
        return f"{self.registry}/{self.repository}"

    def __str__(self) -> str:
        text = self.name
        if self.tag is not None:
            text += f":{self.tag}"
        if self.digest is not None:
            text += f"@{self.digest}"
        return text

    def with_digest(self, digest: str) -> ImageReference:
        """The same repository pinned to `digest` (no tag): what a pull resolved."""
        return ImageReference(self.registry, self.repository, None, digest)


def parse(image: str) -> ImageReference:
    """Normalise `image` as the kubelet does; InvalidImageName if it is not one."""
    if not image or image != image.strip():
        raise InvalidImageName(f"invalid image name {image!r}: empty or with spaces")
    rest, digest = image, None
    if "@" in rest:
        rest, digest = rest.split("@", 1)
        if not _DIGEST.fullmatch(digest):
            raise InvalidImageName(f"invalid image name {image!r}: bad digest {digest!r}")
        if digest.startswith("sha256:") and not _SHA256.fullmatch(digest):
            raise InvalidImageName(f"invalid image name {image!r}: sha256 needs 64 hex digits")
    tag = None
    last = rest.rsplit("/", 1)[-1]
    if ":" in last:
        rest, tag = rest.rsplit(":", 1)
        if not _TAG.fullmatch(tag):
            raise InvalidImageName(f"invalid image name {image!r}: bad tag {tag!r}")
    registry, repository = _split_registry(rest)
    if not _DOMAIN.fullmatch(registry):
        raise InvalidImageName(f"invalid image name {image!r}: bad registry host {registry!r}")
    components = repository.split("/")
    if repository.lower() != repository:
        raise InvalidImageName(f"invalid image name {image!r}: repository name must be lowercase")
    if not all(_PATH_COMPONENT.fullmatch(c) for c in components):
        raise InvalidImageName(f"invalid image name {image!r}: bad repository {repository!r}")
    if len(registry) + 1 + len(repository) > MAX_NAME:
        raise InvalidImageName(f"invalid image name {image!r}: longer than {MAX_NAME}")
    if tag is None and digest is None:
        tag = DEFAULT_TAG
    return ImageReference(registry, repository, tag, digest)


def _split_registry(name: str) -> tuple[str, str]:
    first, sep, remainder = name.partition("/")
    is_host = sep and (
        any(c in first for c in ".:") or first == "localhost" or first != first.lower()
    )
    registry, repository = (first, remainder) if is_host else (DOCKER_HUB, name)
    if registry == _LEGACY_HUB:
        registry = DOCKER_HUB
    if registry == DOCKER_HUB and "/" not in repository:
        repository = f"library/{repository}"
    return registry, repository


def default_pull_policy(image: str) -> str:
    """The API server's default `imagePullPolicy`: `Always` for `:latest` or no tag
    (a digest alone is not "no tag": it pins the content), else `IfNotPresent`."""
    try:
        ref = parse(image)
    except InvalidImageName:
        return "IfNotPresent"
    return "Always" if ref.tag == DEFAULT_TAG else "IfNotPresent"
