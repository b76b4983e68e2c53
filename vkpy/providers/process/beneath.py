"""Resolving a path inside a directory a pod can write, without following its links.

vkpy runs as root; a pod controls what is inside its emptyDir and inside hostPath
directories it may write, and can plant a symbolic link there (`z -> /etc/systemd`).
A `subPath` (or a hostPath to be created) resolved with ordinary path calls would
then make root create directories, and hand them to the pod, wherever the link
points. Here the path is walked one component at a time from an open descriptor of
the base directory (`openat` with `O_NOFOLLOW`): a link anywhere on the way is
refused, a missing directory is made with `mkdirat` and given to its owner through
the descriptor just opened (`fchown`), never by name. The kernel's `openat2` with
`RESOLVE_NO_SYMLINKS` would do the same in one call; Python has no binding for it,
and the walk works on every kernel.
"""

from __future__ import annotations

import contextlib
import os
import stat
from pathlib import Path

from vkpy.providers.process.config import RunAs


class LinkRefused(FileNotFoundError):
    """The path goes through a symbolic link (or something that is not a directory)."""


def _open_dir(name: str, parent: int, what: str) -> int:
    try:
        fd = os.open(name, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW, dir_fd=parent)
    except OSError as error:
        with contextlib.suppress(OSError):
            if stat.S_ISLNK(os.lstat(name, dir_fd=parent).st_mode):
                raise LinkRefused(
                    f"{what}: {name!r} is a symbolic link, which vkpy does not follow "
                    "here (it could lead out of the volume)"
                ) from None
        raise LinkRefused(f"{what}: {name!r} is not a directory ({error.strerror})") from None
    return fd


def resolve_beneath(
    base: Path,
    relative: str,
    what: str,
    create: bool = False,
    mode: int = 0o755,
    owner: RunAs | None = None,
) -> Path:
    """`base/relative`, checked (and with `create`, made) without following any link
    below `base`; the last component may be a file. Directories made get `mode` and,
    with `owner`, that owner. Raises LinkRefused (a FileNotFoundError)."""
    parts = [p for p in relative.split("/") if p not in ("", ".")]
    if ".." in parts:
        raise LinkRefused(f"{what}: {relative!r} contains '..'")
    fd = os.open(base, os.O_RDONLY | os.O_DIRECTORY)
    try:
        for index, name in enumerate(parts):
            last = index == len(parts) - 1
            try:
                info = os.lstat(name, dir_fd=fd)
            except FileNotFoundError:
                if not create:
                    raise FileNotFoundError(f"{what}: {relative!r} does not exist") from None
                os.mkdir(name, mode, dir_fd=fd)
                made = _open_dir(name, fd, what)
                if owner is not None and owner.uid is not None:
                    os.fchown(made, owner.uid, owner.gid if owner.gid is not None else -1)
                os.fchmod(made, mode)
                os.close(fd)
                fd = made
                continue
            if stat.S_ISLNK(info.st_mode):
                raise LinkRefused(
                    f"{what}: {name!r} in {relative!r} is a symbolic link, which vkpy does "
                    "not follow (it could lead out of the volume)"
                )
            if last and not stat.S_ISDIR(info.st_mode):
                break
            child = _open_dir(name, fd, what)
            os.close(fd)
            fd = child
    finally:
        os.close(fd)
    return base.joinpath(*parts) if parts else base
