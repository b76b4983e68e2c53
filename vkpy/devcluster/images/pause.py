"""pause: registry.k8s.io/pause, a static program that only waits.

Kubernetes' pause image holds a pod's namespaces; the suite and some manifests name
it. Ours is pause.c (written for vkpy, a few lines: sigwait for INT/TERM, reap
children) compiled with the machine's `gcc -static`, alone in its image and run as
65535:65535 as upstream's is.
"""

from __future__ import annotations

import shutil
from pathlib import Path

from .build import ImageConfig, ImageUnavailable, cached, layout_from_rootfs, recipe_key, run

SOURCE = Path(__file__).with_name("pause.c")
RECIPE = "1"
CONFIG = ImageConfig(entrypoint=("/pause",), env=(), user="65535:65535")


def _fill(rootfs: Path) -> None:
    run("gcc", "-static", "-Os", "-s", "-o", rootfs / "pause", SOURCE)


def pause() -> Path:
    """The pause image's OCI layout (tag `latest`)."""
    if shutil.which("gcc") is None:
        raise ImageUnavailable("no gcc: install gcc and libc6-dev (`make system-deps`)")
    key = recipe_key(RECIPE, SOURCE.read_bytes(), run("gcc", "--version").splitlines()[0])
    return cached("pause", key, lambda layout: layout_from_rootfs(layout, _fill, CONFIG))
