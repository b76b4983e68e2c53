"""A container's root filesystem as an overlay on its image, id-mapped to its pod.

Unpacking the image for every container (umoci with an id map, so the pod's root
owns its files) costs a copy of the image per container: a third of a second for
busybox, seconds and the image's size on disk for nginx. Instead the image is
unpacked once per node with the ids it carries (vkpy.oci.images.bases), and each
container's root is an overlay: the shared tree as its lower layer, seen through an
*id-mapped mount* (Linux 5.12+; an overlay on an id-mapped layer, 5.19+; a layer
given by descriptor, `lowerdir+` with FSCONFIG_SET_FD, 6.13+) that maps the image's
ids through the pod's user namespace (image id 0 is the pod's first host id), and a
directory of the container's own as its upper layer, which takes what the container
writes. The shared tree is never written: overlayfs copies a file up before changing
it, with the ownership the mapped layer shows.

runc 1.1 takes a root filesystem as a path and knows neither id-mapped mounts nor
overlays (its 1.2 maps bind mounts, not the root), so vkpy mounts the overlay on the
container's `rootfs` directory before `runc create` and unmounts it when the pod
goes. Python has no binding for the new mount API (open_tree, mount_setattr, fsopen,
fsconfig, fsmount, move_mount), hence ctypes; the numbers are the same on every
architecture. `supported()` says whether this kernel takes it (the caller unpacks a
copy per container otherwise).

`bind_idmapped` uses the same calls for a pod's hostPath volumes: a copy of the
host's mount at that place, id-mapped through the pod's user namespace, as
Kubernetes mounts the volumes of a `hostUsers: false` pod (runc 1.1 cannot).
"""

from __future__ import annotations

import contextlib
import ctypes
import os
from pathlib import Path

_OPEN_TREE = 428
_MOVE_MOUNT = 429
_FSOPEN = 430
_FSCONFIG = 431
_FSMOUNT = 432
_MOUNT_SETATTR = 442

OPEN_TREE_CLONE = 0x1
OPEN_TREE_CLOEXEC = 0o2000000
AT_FDCWD = -100
AT_EMPTY_PATH = 0x1000
AT_RECURSIVE = 0x8000
MOVE_MOUNT_F_EMPTY_PATH = 0x4
FSOPEN_CLOEXEC = 0x1
FSMOUNT_CLOEXEC = 0x1
FSCONFIG_SET_STRING = 1
FSCONFIG_SET_FD = 5
FSCONFIG_CMD_CREATE = 6
MOUNT_ATTR_IDMAP = 0x00100000
MNT_DETACH = 2

_libc: ctypes.CDLL | None = None


class OverlayError(OSError):
    """A mount call failed: which one, and the kernel's reason."""


class _MountAttr(ctypes.Structure):
    _fields_ = (
        ("attr_set", ctypes.c_uint64),
        ("attr_clr", ctypes.c_uint64),
        ("propagation", ctypes.c_uint64),
        ("userns_fd", ctypes.c_uint64),
    )


def _lib() -> ctypes.CDLL:
    global _libc  # noqa: PLW0603 (loaded once, on first use)
    if _libc is None:
        _libc = ctypes.CDLL(None, use_errno=True)
        _libc.syscall.restype = ctypes.c_long
        _libc.umount2.argtypes = (ctypes.c_char_p, ctypes.c_int)
    return _libc


def _call(what: str, number: int, *args: object) -> int:
    result = int(_lib().syscall(number, *args))
    if result < 0:
        error = ctypes.get_errno()
        raise OverlayError(error, f"{what}: {os.strerror(error)}")
    return result


def _idmap(tree: int, userns: str, flags: int) -> None:
    """Id-map the detached mount `tree` through the user namespace file `userns`
    (`flags`: AT_RECURSIVE for its submounts too)."""
    ns = os.open(userns, os.O_RDONLY | os.O_CLOEXEC)
    try:
        attr = _MountAttr(MOUNT_ATTR_IDMAP, 0, 0, ns)
        _call(
            "mount_setattr(idmap)",
            _MOUNT_SETATTR,
            tree,
            b"",
            AT_EMPTY_PATH | flags,
            ctypes.byref(attr),
            ctypes.sizeof(attr),
        )
    finally:
        os.close(ns)


def _attach(detached: int, target: Path) -> None:
    """Attach the detached mount `detached` at `target`."""
    _call(
        "move_mount",
        _MOVE_MOUNT,
        detached,
        b"",
        AT_FDCWD,
        os.fsencode(target),
        MOVE_MOUNT_F_EMPTY_PATH,
    )


def mount(lower: Path, upper: Path, work: Path, target: Path, userns: str | None) -> None:
    """Mount an overlay on `target`: `lower` read-only (id-mapped through the user
    namespace file `userns`, e.g. `/proc/PID/ns/user`, unless None), `upper` and
    `work` the container's own (empty, or what an earlier run of it wrote)."""
    fds: list[int] = []
    try:
        tree = _call(
            "open_tree",
            _OPEN_TREE,
            AT_FDCWD,
            os.fsencode(lower),
            OPEN_TREE_CLONE | OPEN_TREE_CLOEXEC | AT_RECURSIVE,
        )
        fds.append(tree)
        if userns is not None:
            _idmap(tree, userns, 0)
        context = _call("fsopen(overlay)", _FSOPEN, b"overlay", FSOPEN_CLOEXEC)
        fds.append(context)
        _call("fsconfig(lowerdir+)", _FSCONFIG, context, FSCONFIG_SET_FD, b"lowerdir+", None, tree)
        for key, value in (("upperdir", upper), ("workdir", work)):
            _call(
                f"fsconfig({key})",
                _FSCONFIG,
                context,
                FSCONFIG_SET_STRING,
                key.encode(),
                os.fsencode(value),
                0,
            )
        _call("fsconfig(create)", _FSCONFIG, context, FSCONFIG_CMD_CREATE, None, None, 0)
        mounted = _call("fsmount", _FSMOUNT, context, FSMOUNT_CLOEXEC, 0)
        fds.append(mounted)
        _attach(mounted, target)
    finally:
        for fd in fds:
            os.close(fd)


def bind_idmapped(source: int, target: Path, userns: str) -> None:
    """Mount on `target` a copy of the mount tree at the descriptor `source` (from
    that place down, submounts included), id-mapped through the user namespace file
    `userns`: the host's ids 0-65535 are the pod's 0-65535 in it, so the pod's root
    writes where the host's root may and its files are the host root's. OverlayError
    where the filesystem cannot be id-mapped (the caller binds it unmapped)."""
    tree = _call(
        "open_tree",
        _OPEN_TREE,
        source,
        b"",
        OPEN_TREE_CLONE | OPEN_TREE_CLOEXEC | AT_RECURSIVE | AT_EMPTY_PATH,
    )
    try:
        _idmap(tree, userns, AT_RECURSIVE)
        _attach(tree, target)
    finally:
        os.close(tree)


def is_mount(path: Path) -> bool:
    """Whether something is mounted on `path` (in this mount namespace)."""
    wanted = os.fsencode(os.path.abspath(path)).replace(b"\\", b"\\134")
    for escaped in (b" ", b"\t", b"\n"):
        wanted = wanted.replace(escaped, f"\\{ord(escaped):03o}".encode())
    with open("/proc/self/mountinfo", "rb") as mounts:
        return any(line.split(b" ")[4] == wanted for line in mounts)


def unmount(target: Path) -> None:
    """Detach whatever is mounted on `target` (every layer of it); nothing if none."""
    while is_mount(target):
        if _lib().umount2(os.fsencode(target), MNT_DETACH) != 0:
            error = ctypes.get_errno()
            raise OverlayError(error, f"umount {target}: {os.strerror(error)}")


def supported(scratch: Path) -> bool:
    """Whether this kernel mounts an overlay on a layer given by descriptor (tried
    once, in `scratch`, which is left empty)."""
    scratch.mkdir(parents=True, exist_ok=True)
    parts = [scratch / name for name in ("lower", "upper", "work", "merged")]
    try:
        for part in parts:
            part.mkdir(exist_ok=True)
        mount(parts[0], parts[1], parts[2], parts[3], None)
    except OSError:
        return False
    else:
        unmount(parts[3])
        return True
    finally:
        for part in reversed(parts):
            with contextlib.suppress(OSError):
                for child in part.iterdir():
                    if child.is_dir():
                        child.rmdir()  # overlayfs' `work` subdirectory
                part.rmdir()
