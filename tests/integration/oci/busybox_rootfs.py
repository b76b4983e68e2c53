"""A root filesystem for runc tests: Debian's busybox-static and its applet links.

The image store (vkpy/oci/images) gives real images; these tests of the runtime only
need a root filesystem, built here from the host's /bin/busybox (Debian package
busybox-static, a static binary: nothing else to copy), owned by the pod's root in the
host's id range as an unpacked image of a `hostUsers: false` pod is.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

BUSYBOX = Path("/bin/busybox")


def build(root: Path, owner: int) -> Path:
    """A busybox root filesystem at `root`, every file owned by host id `owner`."""
    (root / "bin").mkdir(parents=True)
    shutil.copy2(BUSYBOX, root / "bin" / "busybox")
    applets = subprocess.run(
        [str(BUSYBOX), "--list"], check=True, capture_output=True, text=True
    ).stdout.split()
    for applet in applets:
        if applet != "busybox":
            (root / "bin" / applet).symlink_to("busybox")
    for name in ("proc", "dev", "sys", "tmp", "etc", "root", "data"):
        (root / name).mkdir(exist_ok=True)
    (root / "tmp").chmod(0o1777)
    (root / "etc" / "passwd").write_text(
        "root::0:0:root:/root:/bin/sh\nuser:x:1000:1000:user:/tmp:/bin/sh\n"
    )
    (root / "etc" / "group").write_text("root:x:0:\ntty:x:5:\nuser:x:1000:\n")
    for path in [root, *root.rglob("*")]:
        os.lchown(path, owner, owner)
    return root
