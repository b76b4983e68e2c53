"""agnhost: registry.k8s.io/e2e-test-images/agnhost, the conformance suite's tool.

As upstream's image: the agnhost program (built from its Go module by
`controlplane/build.sh agnhost`, pinned like the other tools) at /agnhost with the
second name /agnhost-2, the suite's TLS pair /localhost.crt and /localhost.key (from
the same Kubernetes module's test/images/agnhost/porter), ENTRYPOINT ["/agnhost"],
CMD ["pause"], run as root; with the tools upstream's Dockerfile installs for the
suite's commands (curl and nc in exec probes, hooks and the networking specs' dial
checks, `ss`, DNS lookups, iperf, bash), here Debian's packages in the minimal Debian
root debian.py makes (upstream's are Alpine's). Upstream's base is busybox (Alpine),
whose applets the suite also calls (the port-forward specs' readiness probe runs
`netstat`): Debian's busybox-static gives each applet the root has no program for.
So it is built as root, as the other Debian images are.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

from vkpy.devcluster.binaries import CONTROLPLANE_DIR, BinariesMissing, tool_dir

from . import debian
from .build import ImageConfig, ImageUnavailable, cached, layout_from_rootfs, recipe_key

RECIPE = "3"
PACKAGES = (
    "curl",
    "netcat-openbsd",
    "iproute2",
    "bind9-dnsutils",
    "iperf",
    "bash",
    "wget",
    "busybox-static",
)
"""What upstream's image adds to its base (curl, netcat-openbsd, iproute2, bind-tools,
iperf, bash), and its busybox base's applets (wget among them)."""
CONFIG = ImageConfig(
    entrypoint=("/agnhost",),
    cmd=("pause",),
    env=("PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin:/",),
    working_dir="/",
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


def _busybox_applets(rootfs: Path) -> None:
    """A link to busybox for each applet no program of the root provides, at the
    applet's own path (busybox is static: listed here by running it)."""
    listed = subprocess.run(
        [str(rootfs / "bin" / "busybox"), "--list-full"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()
    places = ("bin", "sbin", "usr/bin", "usr/sbin")
    for applet in listed:
        name = Path(applet).name
        if any(os.path.lexists(rootfs / place / name) for place in places):
            continue
        (rootfs / applet).symlink_to("/bin/busybox")


def agnhost() -> Path:
    """The agnhost image's OCI layout (tag `latest`)."""
    try:
        binary = tool_dir("agnhost") / "agnhost"
    except BinariesMissing as e:
        raise ImageUnavailable(f"agnhost could not be built (Go 1.26+ needed): {e}") from None
    porter = porter_files()
    key = recipe_key(
        RECIPE,
        debian.SUITE,
        debian.mirror(),
        repr(debian.EXCLUDES),
        repr(PACKAGES),
        repr(CONFIG),
        str(binary.resolve()),
        str(binary.stat().st_mtime_ns),
    )

    def fill(rootfs: Path) -> None:
        debian.debian_root(rootfs, PACKAGES, "agnhost")
        _busybox_applets(rootfs)
        shutil.copy2(binary, rootfs / "agnhost")
        (rootfs / "agnhost-2").symlink_to("agnhost")
        for name in ("localhost.crt", "localhost.key"):
            shutil.copyfile(porter / name, rootfs / name)
            (rootfs / name).chmod(0o644)

    return cached("agnhost", key, lambda layout: layout_from_rootfs(layout, fill, CONFIG))
