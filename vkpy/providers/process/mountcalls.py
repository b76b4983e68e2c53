"""The Linux calls that build a pod's filesystem view, through ctypes.

Python 3.11 has no binding for mount, unshare, setns, pivot_root or the new mount
API (open_tree, move_mount, mount_setattr, Linux 5.12 and later). The pod's view is
built from *detached copies* of mount trees (`open_tree(OPEN_TREE_CLONE)`): they are
taken while the process still sees the host, carry their flags (read-only, nosuid)
before they are attached, and are attached in the pod's mount namespace with
`move_mount`, so no host path is ever resolved as root from inside the pod's view.

Standard library only: the namespace holder and enter.py run it as plain scripts.
"""

from __future__ import annotations

import ctypes
import os
import platform
import re

CLONE_NEWNS = 0x00020000
CLONE_NEWUTS = 0x04000000
CLONE_NEWIPC = 0x08000000
CLONE_NEWPID = 0x20000000
CLONE_NEWNET = 0x40000000

MS_RDONLY = 1
MS_NOSUID = 2
MS_NODEV = 4
MS_NOEXEC = 8
MS_REC = 0x4000
MS_PRIVATE = 1 << 18
MNT_DETACH = 2

OPEN_TREE_CLONE = 1
AT_EMPTY_PATH = 0x1000
AT_RECURSIVE = 0x8000
AT_SYMLINK_NOFOLLOW = 0x100
AT_FDCWD = -100
MOVE_MOUNT_F_EMPTY_PATH = 0x4

MOUNT_ATTR_RDONLY = 0x1
MOUNT_ATTR_NOSUID = 0x2
MOUNT_ATTR_NODEV = 0x4
MOUNT_ATTR_NOEXEC = 0x8

# The new mount API has the same numbers on every architecture; pivot_root does not.
_OPEN_TREE = 428
_MOVE_MOUNT = 429
_MOUNT_SETATTR = 442
_PIVOT_ROOT = {"x86_64": 155, "aarch64": 41, "riscv64": 41, "ppc64le": 203, "s390x": 217}

_libc: ctypes.CDLL | None = None


def _lib() -> ctypes.CDLL:
    global _libc  # noqa: PLW0603 (loaded once, on first use)
    if _libc is None:
        _libc = ctypes.CDLL(None, use_errno=True)
        _libc.syscall.restype = ctypes.c_long
    return _libc


def _check(result: int, what: str) -> int:
    if result < 0:
        error = ctypes.get_errno()
        raise OSError(error, f"{what}: {os.strerror(error)}")
    return result


def _path(path: str | None) -> bytes | None:
    return None if path is None else os.fsencode(path)


def mount(source: str, target: str, fstype: str | None, flags: int, data: str = "") -> None:
    result = _lib().mount(
        _path(source), _path(target), _path(fstype), ctypes.c_ulong(flags), _path(data or None)
    )
    _check(result, f"mount {fstype or source} on {target}")


def umount(target: str, flags: int = MNT_DETACH) -> None:
    _check(_lib().umount2(_path(target), flags), f"umount {target}")


def unshare(flags: int) -> None:
    _check(_lib().unshare(flags), "unshare")


def setns(fd: int, kind: int = 0, what: str = "") -> None:
    """Join the namespace `fd` (of type `kind`, 0: any); `what` names it in the error."""
    _check(_lib().setns(fd, kind), f"setns {what}" if what else "setns")


def set_hostname(name: str) -> None:
    data = os.fsencode(name)
    _check(_lib().sethostname(data, len(data)), "sethostname")


def pivot_root(new_root: str, put_old: str) -> None:
    number = _PIVOT_ROOT.get(platform.machine())
    if number is None:
        raise OSError(f"pivot_root: unknown architecture {platform.machine()}")
    _check(_lib().syscall(number, _path(new_root), _path(put_old)), "pivot_root")


def open_tree(path: str, dir_fd: int = AT_FDCWD, recursive: bool = True) -> int:
    """A detached copy of the mount tree at `path` (relative to `dir_fd`; "" with a
    descriptor: that very file), as a descriptor closed on exec."""
    flags = OPEN_TREE_CLONE | os.O_CLOEXEC | AT_SYMLINK_NOFOLLOW
    if recursive:
        flags |= AT_RECURSIVE
    if path == "":
        flags |= AT_EMPTY_PATH
    result = _lib().syscall(_OPEN_TREE, dir_fd, _path(path), ctypes.c_uint(flags))
    return _check(int(result), f"open_tree {path or dir_fd}")


def move_mount(tree: int, target: str) -> None:
    """Attach the detached tree `tree` at `target`."""
    result = _lib().syscall(
        _MOVE_MOUNT, tree, b"", AT_FDCWD, _path(target), ctypes.c_uint(MOVE_MOUNT_F_EMPTY_PATH)
    )
    _check(int(result), f"move_mount on {target}")


class _MountAttr(ctypes.Structure):
    _fields_ = (
        ("attr_set", ctypes.c_uint64),
        ("attr_clr", ctypes.c_uint64),
        ("propagation", ctypes.c_uint64),
        ("userns_fd", ctypes.c_uint64),
    )


def set_attributes(
    target: int | str, attributes: int, recursive: bool = True, clear: int = 0
) -> None:
    """Set (and `clear`) MOUNT_ATTR_* on a tree (descriptor) or on the mount at a path."""
    attr = _MountAttr(attributes, clear, 0, 0)
    flags = AT_RECURSIVE if recursive else 0
    if isinstance(target, int):
        fd, path = target, b""
        flags |= AT_EMPTY_PATH
    else:
        fd, path = AT_FDCWD, os.fsencode(target)
    result = _lib().syscall(
        _MOUNT_SETATTR, fd, path, ctypes.c_uint(flags), ctypes.byref(attr), ctypes.sizeof(attr)
    )
    _check(int(result), f"mount_setattr {target}")


def mount_points() -> list[str]:
    """Where something is mounted in this mount namespace (/proc/self/mountinfo);
    empty when it cannot be read."""
    try:
        with open("/proc/self/mountinfo", encoding="utf-8") as info:
            fields = [line.split(" ")[4] for line in info if line.count(" ") >= 4]
    except OSError:
        return []
    # Spaces, tabs, newlines and backslashes in a path are written as \ooo (octal).
    return [re.sub(r"\\([0-7]{3})", lambda m: chr(int(m.group(1), 8)), f) for f in fields]
