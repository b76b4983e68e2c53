"""A `runtime: oci` pod's hostPath volumes, mounted as Kubernetes mounts the volumes
of a `hostUsers: false` pod: id-mapped through the pod's user namespace.

A pod's root is an unprivileged host id (its user namespace), so without a mapping
a hostPath shows the host's root-owned files as nobody's and the pod's root cannot
write where a kubelet's pod root (the host's root, `hostUsers: true`) writes: the
conformance spec "HostPath should support subPath" writes into a directory of /tmp
the node made. Kubernetes' runtimes (containerd 2, CRI-O, runc 1.2) mount such a
pod's volumes id-mapped; runc 1.1 cannot, so vkpy makes the mapped copy of the
host's mount itself (vkpy.oci.runtime.overlay.bind_idmapped) below the container's
directory and runc binds that. What the pod's root writes there is the host root's,
as with the kubelet; the pod's processes keep their own ids. Only what the node's
`host_path_prefixes` allow is ever mounted (validation.py), and the copy goes with
the pod's directory (every mount below it is detached when the pod is removed).

A filesystem that cannot be id-mapped (before Linux 5.12, or one without support)
is bound unmapped, as before, with one warning.
"""

from __future__ import annotations

import logging
import os
import stat
from pathlib import Path

from vkpy.oci.runtime import overlay
from vkpy.providers.process import beneath

log = logging.getLogger(__name__)

STAGED = "host-paths"
"""Below a container's directory: the id-mapped copies runc binds."""
_warned: set[str] = set()


def open_made(base: str, relative: str) -> int:
    """An O_PATH descriptor of base/relative, never following a link below `base`;
    missing directories on the way are made first, root's, with the mode of the
    deepest one there is (the hostPath's own directory, for a missing subPath), as
    the kubelet makes a subPath with its volume's mode."""
    try:
        return beneath.open_path(base, relative, "subPath")
    except beneath.LinkRefused:
        mode = _deepest_mode(base, beneath.split(relative, "subPath"))
        beneath.make_dirs(base, relative, "subPath", mode & 0o777)
        return beneath.open_path(base, relative, "subPath")


def _deepest_mode(base: str, parts: list[str]) -> int:
    """The mode of the deepest directory of base/parts there is (`base` at least: the
    admin's prefix, followed), walked without following a link below `base`."""
    for depth in range(len(parts) - 1, 0, -1):
        try:
            there = beneath.open_path(base, "/".join(parts[:depth]), "subPath")
        except beneath.LinkRefused:
            continue
        try:
            return stat.S_IMODE(os.fstat(there).st_mode)
        finally:
            os.close(there)
    return stat.S_IMODE(os.stat(base).st_mode)


def id_mapped(fd: int, staged: Path, userns: str) -> str:
    """The path runc binds for the host's entry at `fd`: its id-mapped copy at
    `staged` (made again for each run of the container), or the entry itself where
    it cannot be mapped."""
    overlay.unmount(staged)
    staged.parent.mkdir(mode=0o711, exist_ok=True)
    if stat.S_ISDIR(os.fstat(fd).st_mode):
        staged.mkdir(mode=0o755, exist_ok=True)
    else:
        staged.touch(mode=0o644, exist_ok=True)
    try:
        overlay.bind_idmapped(fd, staged, userns)
    except overlay.OverlayError as error:
        where = os.readlink(f"/proc/self/fd/{fd}")
        if where not in _warned:
            _warned.add(where)
            log.warning(
                "hostPath not id-mapped: the pod's root cannot write its root-owned files",
                extra={"path": where, "error": str(error)},
            )
        return where
    return str(staged)
