"""A container's volumes at their real `mountPath`, in the pod's mount namespace.

Containers of one pod may mount different volumes at one path, so the pod's mount
namespace (podroot.py) holds only what the pod shares (its root, /tmp, /etc/hosts);
every process of a container (main process, probe, hook, `kubectl exec`) takes a
private copy of it (`unshare(CLONE_NEWNS)`) and attaches the container's volumes
there before it drops root. Two halves:

- `open_volumes`, while the process still sees the host: each source is opened
  without following any link the pod could have planted (the part of the path a
  pod can write is walked with O_NOFOLLOW), copied as a detached mount tree, and
  marked nosuid, nodev and, for `readOnly` and the kubelet-made volumes, read-only.
- `attach`, inside the pod's view: each tree is moved onto its mount path. A mount
  path that does not exist in the (read-only) root is made without writing into
  the host: its deepest existing directory is *shadowed* by a small tmpfs that
  holds a read-only bind of every entry it had, the missing directories are made
  on that tmpfs, and the tmpfs is made read-only once everything is attached.

Standard library only (enter.py runs it as a plain script).
"""

from __future__ import annotations

import contextlib
import os
import stat

from vkpy.providers.process import beneath
from vkpy.providers.process import mountcalls as calls

ALWAYS = calls.MOUNT_ATTR_NOSUID | calls.MOUNT_ATTR_NODEV
SHADOW_SIZE = "1m"


class MountRefused(OSError):
    """A volume cannot be mounted where the container asks (the message says why)."""


def _walk(base: str, relative: str) -> int:
    """An O_PATH descriptor of base/relative: `base` is followed (vkpy made it, the
    pod cannot change it), `relative` is walked without following any link
    (beneath.py); refused as MountRefused (not a FileNotFoundError: that would read
    as a missing executable)."""
    try:
        return beneath.open_path(base, relative, "volume")
    except beneath.LinkRefused as error:
        raise MountRefused(str(error).removeprefix("volume: ")) from None


def open_volumes(mounts: list[list[object]]) -> list[tuple[int, str, bool]]:
    """Detached trees for `[base, relative, target, readOnly]` entries: (tree,
    target, is a directory), shallowest target first."""
    trees = []
    for base, relative, target, readonly in sorted(
        mounts, key=lambda m: len(str(m[2]).rstrip("/").split("/"))
    ):
        fd = _walk(str(base), str(relative))
        try:
            directory = stat.S_ISDIR(os.fstat(fd).st_mode)
            tree = calls.open_tree("", fd)
        finally:
            os.close(fd)
        calls.set_attributes(tree, ALWAYS | (calls.MOUNT_ATTR_RDONLY if readonly else 0))
        trees.append((tree, str(target), directory))
    return trees


def shadow(directory: str, onto: str | None = None, attributes: int = 0) -> None:
    """Cover `directory` (or, with `onto`, that directory) with a tmpfs that shows what
    `directory` showed (binds of its entries, with `attributes`, and the same links),
    so that entries can be added to it."""
    info = os.stat(directory)
    entries = list(os.scandir(directory))
    copies: dict[str, int] = {}
    links = {e.name: os.readlink(e.path) for e in entries if e.is_symlink()}
    onto = onto or directory
    try:
        for entry in entries:
            if entry.name not in links:
                copies[entry.name] = calls.open_tree(entry.path)
                if attributes:
                    calls.set_attributes(copies[entry.name], attributes)
        mode = stat.S_IMODE(info.st_mode)
        calls.mount(
            "tmpfs",
            onto,
            "tmpfs",
            calls.MS_NOSUID | calls.MS_NODEV,
            f"mode={mode:o},uid={info.st_uid},gid={info.st_gid},size={SHADOW_SIZE}",
        )
        for entry in entries:
            path = os.path.join(onto, entry.name)
            copy = copies.get(entry.name)
            if copy is None:
                os.symlink(links[entry.name], path)
                continue
            if stat.S_ISDIR(os.fstat(copy).st_mode):
                os.mkdir(path, 0o755)
            else:
                os.close(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_CLOEXEC, 0o644))
            calls.move_mount(copy, path)
    finally:
        for copy in copies.values():
            os.close(copy)


class MountPoints:
    """Makes mount points in the current root; remembers where it may add entries."""

    def __init__(self, locked: tuple[str, ...] = ()) -> None:
        self.shadows: list[str] = []
        """Directories covered by a shadow tmpfs (sealed read-only at the end)."""
        self.made: set[str] = set(locked)
        """Directories that are ours to add entries to (shadows and what we made)."""
        self.locked = set(locked)
        """Of those, read-only mounts to open for writing first (the pod's root)."""

    def get(self, target: str, directory: bool) -> str:
        """The path to attach a mount for `target` at: links are followed (inside this
        root), and what is missing is made on a shadow tmpfs."""
        parts = [p for p in target.split("/") if p not in ("", ".")]
        if not parts or ".." in parts:
            raise MountRefused(f"mount path {target!r} must be absolute, below /, without '..'")
        current = "/"
        for index, name in enumerate(parts):
            candidate = os.path.join(current, name)
            if os.path.lexists(candidate):
                real = os.path.realpath(candidate)
                if not os.path.exists(real):
                    raise MountRefused(f"mount path {target!r}: {candidate!r} is a dangling link")
                if index < len(parts) - 1 and not os.path.isdir(real):
                    raise MountRefused(f"mount path {target!r}: {candidate!r} is not a directory")
                current = real
                continue
            if current in self.locked:
                calls.set_attributes(current, 0, recursive=False, clear=calls.MOUNT_ATTR_RDONLY)
                self.locked.discard(current)
                self.shadows.append(current)
            elif current not in self.made:
                shadow(current)
                self.shadows.append(current)
                self.made.add(current)
            for middle in parts[index:-1]:
                current = os.path.join(current, middle)
                os.mkdir(current, 0o755)
                self.made.add(current)
            current = os.path.join(current, parts[-1])
            if directory:
                os.mkdir(current, 0o755)
            else:
                os.close(os.open(current, os.O_WRONLY | os.O_CREAT | os.O_CLOEXEC, 0o644))
            return current
        if os.path.isdir(current) != directory:
            kind = "directory" if directory else "file"
            raise MountRefused(f"mount path {target!r} is not a {kind} like its volume")
        return current

    def seal(self) -> None:
        """Make the shadow tmpfs read-only, now that every mount point exists."""
        for path in self.shadows:
            calls.set_attributes(path, calls.MOUNT_ATTR_RDONLY, recursive=False)


def attach(
    trees: list[tuple[int, str, bool]], readonly_root: bool, proc: bool = False, cwd: str = "/"
) -> None:
    """In a private copy of the pod's mount namespace: with `proc`, a /proc of the
    PID namespace this process is in; the container's volumes at their mount paths;
    with `readonly_root` the pod's writable scratch (/tmp, /dev/shm) read-only too,
    so only volumes can be written. Ends in the working directory `cwd`, opened
    before the volumes are attached: one may cover it (an emptyDir on /tmp when the
    pods directory is under /tmp)."""
    calls.unshare(calls.CLONE_NEWNS)
    here = os.open(cwd, os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        _attach(trees, readonly_root, proc)
        os.fchdir(here)
    finally:
        os.close(here)


def _attach(trees: list[tuple[int, str, bool]], readonly_root: bool, proc: bool) -> None:
    if proc:
        with contextlib.suppress(OSError):
            calls.umount("/proc")
        flags = calls.MS_NOSUID | calls.MS_NODEV | calls.MS_NOEXEC
        calls.mount("proc", "/proc", "proc", flags)
    if readonly_root:
        # Before the volumes: one mounted at /tmp (the chart's scratch) lands on top
        # and stays writable; only the pod's own tmpfs beneath it is made read-only.
        for scratch in ("/tmp", "/dev/shm"):  # noqa: S108 (the pod's own tmpfs)
            with contextlib.suppress(OSError):
                if os.path.ismount(scratch):
                    calls.set_attributes(scratch, calls.MOUNT_ATTR_RDONLY, recursive=False)
    covered = _clone_covered([target for _, target, _ in trees])
    points = MountPoints(locked=("/",))  # the pod's root is a tmpfs of ours (podroot.py)
    for tree, target, directory in trees:
        try:
            calls.move_mount(tree, points.get(target, directory))
        finally:
            os.close(tree)
    _attach_again(covered)
    points.seal()


def _clone_covered(targets: list[str]) -> list[tuple[int, str]]:
    """Copies of the mounts a volume is about to cover, to attach again on top.

    The pod's root binds some host directories back below /tmp (the pod's own
    directory and the programs it runs when vkpy's checkout or state lives there);
    a volume mounted at /tmp (the usual scratch emptyDir of a read-only root) would
    hide them, and the container could not even start."""
    covered: list[tuple[int, str]] = []
    prefixes = [t.rstrip("/") + "/" for t in targets if t.strip("/")]
    if not prefixes:
        return covered  # no volume: nothing covered, mountinfo need not be read
    for point in sorted(set(calls.mount_points())):
        if any(point.startswith(p) for p in prefixes) and not any(
            point.startswith(seen.rstrip("/") + "/") for _, seen in covered
        ):
            with contextlib.suppress(OSError):
                covered.append((calls.open_tree(point), point))
    return covered


def _attach_again(covered: list[tuple[int, str]]) -> None:
    """Attach each copy at its old path, in the volume now there (its directories are
    made in it as the kubelet makes a subPath's); skipped where the volume refuses."""
    for tree, point in covered:
        try:
            with contextlib.suppress(OSError):  # a link on the way: not followed
                beneath.make_dirs("/", point, f"mount point {point!r}")
                calls.move_mount(tree, point)
        finally:
            os.close(tree)
