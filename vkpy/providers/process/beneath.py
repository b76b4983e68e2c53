"""Every file operation vkpy does, as root, in a directory a pod can write.

vkpy runs as root; a pod controls what is inside its container roots, its emptyDirs
and the hostPath directories it may write, and can plant a symbolic link there
(`dev -> /etc`, `z -> /etc/systemd`, `m -> /`). An ordinary path call (`mkdir`,
`unlink`, `symlink`, `chown` on a path string) would follow it: root would delete a
host file, or make directories owned by the pod anywhere on the host. So each such
operation goes through this module, which never hands a path string the pod could
have changed to the kernel: from an open descriptor of a base directory vkpy made
(or the admin allowed), the rest of the path is walked one component at a time
with `openat(O_NOFOLLOW | O_DIRECTORY)`, a link or a non-directory anywhere on the
way is refused (LinkRefused, with a message for the pod's status), a missing
directory is made with `mkdirat` and then opened without following links and given
its mode and owner through that descriptor (`fchmod`, `fchown`), and the last
component is created, unlinked or made a link with `*at` calls on the descriptor of
its directory. The kernel's `openat2(RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS)` would
do the walk in one call; Python has no binding for it, and the per-component walk
works on every kernel.

Between the walk and the call, the pod may still rename things in directories it
can write: a directory vkpy holds open can only be moved to another directory the
pod can write itself, so the call still lands where the pod could write anyway,
never in a host directory it cannot. A directory swapped for a link between
`mkdirat` and its `openat` is refused like any link; one swapped for another
directory is the pod's own, given to the pod.

Standard library only: the pod's processes (podmounts.py) use it as a script.
"""

from __future__ import annotations

import contextlib
import errno
import os
import stat
from collections.abc import Iterator
from pathlib import Path
from typing import Protocol

DIR_MODE = 0o755


class Owner(Protocol):
    """Who gets what is made (config.RunAs); None fields: root's, unchanged."""

    @property
    def uid(self) -> int | None: ...

    @property
    def gid(self) -> int | None: ...


class LinkRefused(FileNotFoundError):
    """The path goes through a symbolic link (or something that is not a directory)."""


def split(relative: str, what: str) -> list[str]:
    """The components of `relative` ('' and '.' dropped); '..' is refused."""
    parts = [p for p in relative.split("/") if p not in ("", ".")]
    if ".." in parts:
        raise LinkRefused(f"{what}: {relative!r} contains '..'")
    return parts


def _refuse(name: str, relative: str, what: str, parent: int, error: OSError) -> LinkRefused:
    with contextlib.suppress(OSError):
        if stat.S_ISLNK(os.lstat(name, dir_fd=parent).st_mode):
            return LinkRefused(
                f"{what}: {name!r} in {relative!r} is a symbolic link, which vkpy does "
                "not follow (it could lead out of the pod's directory)"
            )
    if error.errno == errno.ENOENT:
        return LinkRefused(f"{what}: {name!r} in {relative!r} does not exist")
    return LinkRefused(f"{what}: {name!r} in {relative!r} is not a directory ({error.strerror})")


def _open_dir(name: str, parent: int, relative: str, what: str) -> int:
    try:
        return os.open(
            name, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=parent
        )
    except OSError as error:
        raise _refuse(name, relative, what, parent, error) from None


def _set_owner(fd: int, mode: int, owner: Owner | None) -> None:
    if owner is not None and owner.uid is not None:
        os.fchown(fd, owner.uid, owner.gid if owner.gid is not None else -1)
    os.fchmod(fd, mode)


def open_base(base: Path | str) -> int:
    """A descriptor of `base`, a directory vkpy made or the admin chose (followed)."""
    return os.open(base, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)


def walk(
    base: int,
    parts: list[str],
    relative: str,
    what: str,
    create: bool = False,
    mode: int = DIR_MODE,
    owner: Owner | None = None,
) -> int:
    """A new descriptor of the directory base/parts, never following a link; with
    `create`, missing directories are made with `mode` and `owner`. `base` stays open."""
    fd = os.dup(base)
    try:
        for name in parts:
            made = False
            if create:
                try:
                    os.mkdir(name, mode, dir_fd=fd)
                    made = True
                except FileExistsError:
                    pass  # there already: opened (or refused) like any other
            child = _open_dir(name, fd, relative, what)
            if made:
                _set_owner(child, mode, owner)
            os.close(fd)
            fd = child
    except BaseException:
        os.close(fd)
        raise
    return fd


@contextlib.contextmanager
def directory(
    base: Path | str,
    relative: str,
    what: str,
    create: bool = False,
    mode: int = DIR_MODE,
    owner: Owner | None = None,
    shown: str = "",
) -> Iterator[int]:
    """A descriptor of the directory base/relative (see `walk`), closed afterwards;
    `shown`: the path named in refusals (`relative` by default)."""
    parts = split(relative, what)
    with _directory(base, parts, shown or relative, what, create, mode, owner) as fd:
        yield fd


@contextlib.contextmanager
def _directory(
    base: Path | str,
    parts: list[str],
    relative: str,
    what: str,
    create: bool,
    mode: int,
    owner: Owner | None,
) -> Iterator[int]:
    start = open_base(base)
    try:
        fd = walk(start, parts, relative, what, create, mode, owner)
    finally:
        os.close(start)
    try:
        yield fd
    finally:
        os.close(fd)


def resolve_beneath(
    base: Path,
    relative: str,
    what: str,
    create: bool = False,
    mode: int = DIR_MODE,
    owner: Owner | None = None,
) -> Path:
    """`base/relative`, checked (and with `create`, made) without following any link
    below `base`; the last component may be a file (then never made). Directories
    made get `mode` and, with `owner`, that owner. Raises LinkRefused (a
    FileNotFoundError)."""
    parts = split(relative, what)
    if not parts:
        return base
    with _directory(base, parts[:-1], relative, what, create, mode, owner) as parent:
        last = parts[-1]
        try:
            info = os.lstat(last, dir_fd=parent)
        except FileNotFoundError:
            if not create:
                raise FileNotFoundError(f"{what}: {relative!r} does not exist") from None
            os.close(walk(parent, [last], relative, what, True, mode, owner))
        else:
            if stat.S_ISLNK(info.st_mode):
                raise _refuse(last, relative, what, parent, OSError(0, "a link"))
    return base.joinpath(*parts)


def make_dirs(
    base: Path | str,
    relative: str,
    what: str,
    mode: int = DIR_MODE,
    owner: Owner | None = None,
) -> None:
    """mkdir -p of base/relative, beneath `base` (the directories made get `mode`
    and `owner`; existing ones are left as they are)."""
    with directory(base, relative, what, create=True, mode=mode, owner=owner):
        pass


def open_path(base: Path | str, relative: str, what: str) -> int:
    """An O_PATH descriptor of base/relative (a directory or a file, to mount it),
    never following a link below `base` (which is followed: vkpy made it or the admin
    allowed it)."""
    parts = split(relative, what)
    fd = os.open(base, os.O_PATH | os.O_CLOEXEC)
    try:
        for name in parts:
            try:
                child = os.open(name, os.O_PATH | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=fd)
            except OSError as error:
                raise _refuse(name, relative, what, fd, error) from None
            os.close(fd)
            fd = child
            if stat.S_ISLNK(os.fstat(fd).st_mode):
                raise LinkRefused(
                    f"{what}: {name!r} in {relative!r} is a symbolic link, which vkpy does "
                    "not follow (it could lead out of the volume)"
                )
    except BaseException:
        os.close(fd)
        raise
    return fd


def chown_file(directory: Path | str, name: str, uid: int, gid: int) -> bool:
    """Give the regular file `name` in `directory` to uid:gid through a descriptor
    opened without following a link (a link or anything else there is left alone);
    whether it was a regular file."""
    base = open_base(directory)
    try:
        try:
            fd = os.open(
                name, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, dir_fd=base
            )
        except OSError:
            return False  # missing, or a link (ELOOP)
        try:
            if not stat.S_ISREG(os.fstat(fd).st_mode):
                return False
            os.fchown(fd, uid, gid)
            return True
        finally:
            os.close(fd)
    finally:
        os.close(base)


def same_entry(parent: int, name: str, path: Path | str) -> bool:
    """Whether `name` in the directory `parent` is the very directory at `path` (not a
    link to it)."""
    try:
        here = os.lstat(name, dir_fd=parent)
        there = os.stat(path)
    except OSError:
        return False
    return stat.S_ISDIR(here.st_mode) and (here.st_dev, here.st_ino) == (
        there.st_dev,
        there.st_ino,
    )


def place_link(
    base: Path | str,
    relative: str,
    points_to: str,
    what: str,
    mode: int = DIR_MODE,
    owner: Owner | None = None,
    replace_empty_dir: bool = False,
) -> bool:
    """A symbolic link base/relative -> `points_to`, beneath `base`: its directories
    are made (`mode`, `owner`); a link or file already there is unlinked (the entry
    itself, in its own directory); a directory is left (False) unless
    `replace_empty_dir` and it is empty. The link is not followed, ever."""
    parts = split(relative, what)
    if not parts:
        raise LinkRefused(f"{what}: {relative!r} names the base directory itself")
    with _directory(base, parts[:-1], relative, what, True, mode, owner) as parent:
        return link_at(parent, parts[-1], points_to, relative, what, replace_empty_dir)


def link_at(
    parent: int,
    name: str,
    points_to: str,
    relative: str,
    what: str,
    replace_empty_dir: bool = False,
) -> bool:
    """`place_link`'s last step, in the directory `parent` already walked."""
    try:
        info: os.stat_result | None = os.lstat(name, dir_fd=parent)
    except FileNotFoundError:
        info = None
    if info is not None and stat.S_ISDIR(info.st_mode):
        if not replace_empty_dir:
            return False
        try:
            os.rmdir(name, dir_fd=parent)
        except OSError:
            raise FileNotFoundError(
                f"{what}: {relative!r} is a directory that is not empty"
            ) from None
    elif info is not None:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(name, dir_fd=parent)
    os.symlink(points_to, name, dir_fd=parent)
    return True
