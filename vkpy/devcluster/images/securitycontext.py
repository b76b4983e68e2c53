"""nonroot and nonewprivs: the conformance suite's two security-context images.

The suite's runAsNonRoot specs run `registry.k8s.io/e2e-test-images/nonroot:1.5`
(upstream: a base image with `USER 1234`) and expect `id -u` to print 1234, or the
container refused when the pod asks for uid 0; its AllowPrivilegeEscalation specs run
`nonewprivs:1.4` (upstream: `nnp`, a Go program of the Kubernetes module printing its
effective uid, installed set-uid root) and expect `Effective uid: 0` unless escalation
is off. Both are built here on top of the busybox image (upstream's bases are Debian's
and Alpine's; the specs only need `id` and the set-uid program), `nnp` from the pinned
Kubernetes module by the agnhost tool build (controlplane/tools/agnhost/targets).
"""

from __future__ import annotations

import shutil
from pathlib import Path

from vkpy.devcluster.binaries import BinariesMissing, tool_dir

from .build import ImageConfig, ImageUnavailable, cached, layout_on_top, recipe_key
from .busybox import busybox

RECIPE = "1"
NONROOT_UID = "1234"
NONROOT = ImageConfig(cmd=("sh",), env=("PATH=/bin",), working_dir="/", user=NONROOT_UID)
NONEWPRIVS = ImageConfig(cmd=("nnp",), env=("PATH=/usr/local/bin:/bin",), working_dir="/")


def nonroot() -> Path:
    """The nonroot image's OCI layout: busybox whose USER is 1234."""
    base = busybox()
    key = recipe_key(RECIPE, "nonroot", base.name)
    return cached("nonroot", key, lambda layout: layout_on_top(layout, base, _nothing, NONROOT))


def nonewprivs() -> Path:
    """The nonewprivs image's OCI layout: busybox with `nnp` set-uid root on PATH."""
    try:
        binary = tool_dir("agnhost") / "nnp"
    except BinariesMissing as e:
        raise ImageUnavailable(f"nnp could not be built (Go 1.26+ needed): {e}") from None
    if not binary.exists():
        raise ImageUnavailable(f"{binary} is missing: the agnhost tool build makes it")
    base = busybox()
    key = recipe_key(RECIPE, "nonewprivs", base.name, str(binary.stat().st_mtime_ns))

    def fill(rootfs: Path) -> None:
        target = rootfs / "usr" / "local" / "bin"
        target.mkdir(parents=True, exist_ok=True)
        shutil.copy2(binary, target / "nnp")
        (target / "nnp").chmod(0o4755)  # set-uid, owned by root: the image's point

    return cached("nonewprivs", key, lambda layout: layout_on_top(layout, base, fill, NONEWPRIVS))


def _nothing(rootfs: Path) -> None:
    """No files of its own: the image differs from its base by its USER only."""
    (rootfs / "tmp").mkdir(exist_ok=True)
