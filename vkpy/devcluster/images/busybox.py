"""busybox: Debian's busybox-static as an OCI image (docker.io/library/busybox).

The smallest image that is a real one: /bin/busybox and a link per applet, an
/etc/passwd and /etc/group with root and nobody, CMD ["sh"]. The agnhost image is
built on top of it (its shell and tools). A `variant` adds /etc/variant so tests get
a second, different image (its own layer and digest) at no cost.
"""

from __future__ import annotations

import hashlib
import shutil
from pathlib import Path

from .build import ImageConfig, ImageUnavailable, cached, layout_from_rootfs, run

BUSYBOX = Path("/bin/busybox")  # Debian's busybox-static
#: Bump when the build below changes, so cached images are rebuilt.
RECIPE = "2"
CONFIG = ImageConfig(cmd=("sh",), env=("PATH=/bin",), working_dir="/")


def _fill(rootfs: Path, variant: str) -> None:
    for sub in ("bin", "etc", "tmp", "root", "home"):
        (rootfs / sub).mkdir(exist_ok=True)
    shutil.copy2(BUSYBOX, rootfs / "bin/busybox")
    for applet in run(BUSYBOX, "--list").split():
        if applet != "busybox":
            (rootfs / "bin" / applet).symlink_to("busybox")
    (rootfs / "etc/passwd").write_text(
        "root:x:0:0:root:/root:/bin/sh\nnobody:x:65534:65534:nobody:/home:/bin/false\n"
    )
    (rootfs / "etc/group").write_text("root:x:0:\nnogroup:x:65534:\n")
    if variant:
        (rootfs / "etc/variant").write_text(variant + "\n")


def busybox(variant: str = "") -> Path:
    """The busybox image's OCI layout (tag `latest`), built once per busybox binary."""
    if not BUSYBOX.exists():
        raise ImageUnavailable(f"no {BUSYBOX}: install busybox-static (`make system-deps`)")
    key = hashlib.sha256(BUSYBOX.read_bytes() + f"{RECIPE}:{variant}".encode()).hexdigest()[:16]

    def build(layout: Path) -> None:
        layout_from_rootfs(layout, lambda rootfs: _fill(rootfs, variant), CONFIG)

    return cached("busybox", key, build)
