"""agnhost: registry.k8s.io/e2e-test-images/agnhost, the conformance suite's tool.

As upstream's image: the agnhost program (built from its Go module by
`controlplane/build.sh agnhost`, pinned like the other tools) at /agnhost with the
second name /agnhost-2, the suite's TLS pair /localhost.crt and /localhost.key (from
the same Kubernetes module's test/images/agnhost/porter), ENTRYPOINT ["/agnhost"],
CMD ["pause"], run as root; on top of the busybox image, which gives it the shell
and network tools the suite's commands use (upstream's has Alpine's).
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

from vkpy.devcluster.binaries import CONTROLPLANE_DIR, BinariesMissing, tool_dir

from .build import ImageConfig, ImageUnavailable, cached, layout_on_top, recipe_key
from .busybox import busybox

RECIPE = "1"
CONFIG = ImageConfig(
    entrypoint=("/agnhost",), cmd=("pause",), env=("PATH=/bin:/",), working_dir="/"
)


def porter_files() -> Path:
    """The directory holding the image's localhost.crt and localhost.key: the pinned
    Kubernetes module's test/images/agnhost/porter (downloaded by the agnhost build)."""
    if shutil.which("go") is None:
        raise ImageUnavailable("agnhost's image needs Go (its module's files)")
    got = subprocess.run(
        ["go", "list", "-m", "-f", "{{.Dir}}", "k8s.io/kubernetes"],
        cwd=CONTROLPLANE_DIR / "tools" / "agnhost",
        capture_output=True,
        text=True,
        check=False,
    )
    if got.returncode != 0 or not got.stdout.strip():
        raise ImageUnavailable(f"cannot find the Kubernetes module for agnhost: {got.stderr}")
    return Path(got.stdout.strip()) / "test" / "images" / "agnhost" / "porter"


def agnhost() -> Path:
    """The agnhost image's OCI layout (tag `latest`)."""
    try:
        binary = tool_dir("agnhost") / "agnhost"
    except BinariesMissing as e:
        raise ImageUnavailable(f"agnhost could not be built (Go 1.26+ needed): {e}") from None
    porter = porter_files()
    base = busybox()
    key = recipe_key(RECIPE, base.name, str(binary.resolve()), str(binary.stat().st_mtime_ns))

    def fill(rootfs: Path) -> None:
        shutil.copy2(binary, rootfs / "agnhost")
        (rootfs / "agnhost-2").symlink_to("agnhost")
        for name in ("localhost.crt", "localhost.key"):
            shutil.copyfile(porter / name, rootfs / name)
            (rootfs / name).chmod(0o644)

    return cached("agnhost", key, lambda layout: layout_on_top(layout, base, fill, CONFIG))
