"""Which images the dev cluster's registry serves, and under which public names.

Each image is served under the names a manifest, the chart or the conformance suite
uses, so the same pods pull from the public registries on a machine with internet
and from the local registry here, with only the node's mirrors differing.

The suite's names are those of the pinned Kubernetes module's
test/utils/image/manifest.go (E2E_NAMES; a unit test compares them). What is served
under them is what is built here: upstream's busybox 1.35.0 (from its source) as the
suite's busybox, Debian's nginx 1.22 as its nginx images, agnhost built from the
pinned module (its VERSION file: 2.63.0; also served as 2.53, the name the issue's
examples use), the
security-context images nonroot and nonewprivs (securitycontext.py), and
glibc-dns-testing on a minimal Debian root (debian.py). The suite's
other images (E2E_MISSING) are not built.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import vkpy

from . import agnhost, busybox, debian, pause, securitycontext
from .build import ImageUnavailable, cache_dir, manifest_digest, size

log = logging.getLogger("vkpy.devcluster.images")


@dataclass(frozen=True)
class Image:
    name: str
    build: Callable[[], Path]
    #: Fully qualified public names (registry host first) it is served as.
    references: tuple[str, ...]


@dataclass(frozen=True)
class Built:
    image: Image
    layout: Path
    digest: str
    size: int
    seconds: float


#: The suite's images (pinned module's manifest.go) that this catalogue serves.
E2E_NAMES = (
    "registry.k8s.io/e2e-test-images/agnhost:2.63.0",
    "registry.k8s.io/e2e-test-images/busybox:1.37.0-1",
    "registry.k8s.io/e2e-test-images/nginx:1.15-4",
    "registry.k8s.io/e2e-test-images/nginx:1.27-0",
    "registry.k8s.io/pause:3.10.2",
    "registry.k8s.io/e2e-test-images/nonewprivs:1.4",
    "registry.k8s.io/e2e-test-images/nonroot:1.5",
    "registry.k8s.io/e2e-test-images/glibc-dns-testing:2.0.0",
)
#: The suite's images not built here (no recipe yet): a spec that needs one fails to
#: pull it (ErrImagePull), which the conformance report shows.
E2E_MISSING = (
    "agnhost:2.55 (AgnhostPrev)",
    "agnhost:2.6 (the private registry's)",
    "sample-apiserver",
    "apparmor-loader",
    "distroless-iptables",
    "etcd",
    "ipc-utils",
    "kitten",
    "nautilus",
    "nfs-provisioner",
    "node-perf/*",
    "perl",
    "regression-issue-74839",
    "resource-consumer",
    "volume/nfs",
    "volume/iscsi",
)


def all_images() -> tuple[Image, ...]:
    return (
        Image(
            "busybox",
            busybox.busybox,
            (
                "docker.io/library/busybox:latest",
                "docker.io/library/busybox:1.36",
                "registry.k8s.io/e2e-test-images/busybox:1.36.1-1",
                "registry.k8s.io/e2e-test-images/busybox:1.37.0-1",
            ),
        ),
        Image("pause", pause.pause, ("registry.k8s.io/pause:3.10", "registry.k8s.io/pause:3.10.2")),
        Image(
            "agnhost",
            agnhost.agnhost,
            (
                "registry.k8s.io/e2e-test-images/agnhost:2.63.0",
                "registry.k8s.io/e2e-test-images/agnhost:2.53",
            ),
        ),
        Image(
            "nginx",
            debian.nginx,
            (
                "docker.io/library/nginx:alpine",
                "docker.io/library/nginx:latest",
                "registry.k8s.io/e2e-test-images/nginx:1.14-4",
                "registry.k8s.io/e2e-test-images/nginx:1.15-4",
                "registry.k8s.io/e2e-test-images/nginx:1.27-0",
            ),
        ),
        Image(
            "nonroot",
            securitycontext.nonroot,
            ("registry.k8s.io/e2e-test-images/nonroot:1.5",),
        ),
        Image(
            "nonewprivs",
            securitycontext.nonewprivs,
            ("registry.k8s.io/e2e-test-images/nonewprivs:1.4",),
        ),
        Image(
            "glibc-dns-testing",
            debian.glibc_dns_testing,
            ("registry.k8s.io/e2e-test-images/glibc-dns-testing:2.0.0",),
        ),
        Image(
            "python",
            debian.python,
            (
                "docker.io/library/python:3.12-slim",
                "docker.io/library/python:3.12",
                "docker.io/library/python:3",
                "docker.io/library/python:latest",
            ),
        ),
        Image(
            "vkpy",
            debian.vkpy_image,
            (f"docker.io/library/vkpy:{vkpy.__version__}",),
        ),
    )


def names() -> tuple[str, ...]:
    return tuple(image.name for image in all_images())


SUITE_ONLY = ("nonroot", "nonewprivs", "glibc-dns-testing")
"""Images only the conformance suite's specs run (conformance/run.py serves them)."""
CHART_IMAGE = "vkpy"
"""vkpy's own image: the chart's, run only by regular workers (rebuilt whenever vkpy/
changes, 30-100 s)."""


def for_run(workers: bool) -> list[str]:
    """What `run`/`up` serve by default: what a user's pods name (busybox, pause,
    nginx, agnhost, python), and vkpy's image when there are workers to run the chart;
    not the suite's own images, each a build a first `make run` would wait for."""
    skipped = set(SUITE_ONLY) | (set() if workers else {CHART_IMAGE})
    return [name for name in names() if name not in skipped]


def build(selected: Sequence[str] | None = None) -> list[Built]:
    """Build (or find in the cache) each image of `selected` (default: all)."""
    chosen = [i for i in all_images() if selected is None or i.name in selected]
    unknown = set(selected or ()) - {i.name for i in chosen}
    if unknown:
        raise ValueError(f"unknown images {sorted(unknown)}; known: {', '.join(names())}")
    built = []
    for image in chosen:
        began = time.monotonic()
        try:
            layout = image.build()
        except ImageUnavailable as e:
            log.warning(
                "not serving image %s: %s (as root with the same cache: "
                "sudo VKPY_IMAGE_CACHE=%s make images)",
                image.name,
                e,
                cache_dir(),
            )
            continue
        took = time.monotonic() - began
        built.append(Built(image, layout, manifest_digest(layout), size(layout), took))
        log.info("image %s: %s (%d bytes, %.1f s)", image.name, layout.name, built[-1].size, took)
    return built
