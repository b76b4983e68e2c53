"""A pod's files on the host: its volumes, and each container's view of them.

Containers are host processes without a filesystem of their own, so each container
gets a root directory (`containers/<name>/root`) that is its working directory (or
holds it, for `workingDir`), in which every mount path is a symbolic link to the
volume (or to a `subPath` inside it). A container reads `etc/config/key` relative to
where it starts; absolute paths are the host's. Links are relative where they stay in
the pod directory, so a container running as an unprivileged user reaches its volumes
even when the directories above the pod directory are closed to it.

Volumes the kubelet resolved into files (configMap, secret, downwardAPI, projected)
are written the way the kubelet's AtomicWriter does: the files go into a fresh
timestamped directory, a `..data` link is switched to it in one rename, and the
visible names are links through `..data`; a token refresh is thus atomic for
readers. Files keep their mode and belong to the containers' user (a container's
root could read them; ours must be able to), directories belong to root so a
container cannot add, remove or rename entries. With a pod identity of its own
(identity.py) the files belong to root and the pod's private group instead, readable
and never writable by the pod, and the pod's directory is closed to other pods.
emptyDir is a plain directory (0777, like the kubelet's); hostPath links to the host
directory (allowed prefixes are checked beforehand, see validation.py).
"""

from __future__ import annotations

import contextlib
import os
import stat
import time
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from vkpy.providers.base import ContainerConfig, PodConfig, VolumeConfig, VolumeFile
from vkpy.providers.process import beneath
from vkpy.providers.process.beneath import LinkRefused, resolve_beneath
from vkpy.providers.process.config import RunAs
from vkpy.providers.process.layout import ContainerDir, PodDir, remove_tree
from vkpy.providers.process.validation import clean_absolute, clean_relative

DATA_LINK = "..data"
PRIVATE = 0o700
TRAVERSE = 0o711
CLOSED = 0o750


def _chown(path: Path, run_as: RunAs) -> None:
    if run_as.uid is not None:
        os.chown(
            path, run_as.uid, run_as.gid if run_as.gid is not None else -1, follow_symlinks=False
        )


def _makedirs(path: Path, mode: int, run_as: RunAs | None = None) -> None:
    """mkdir -p; directories it makes get `mode` and, with `run_as`, that owner."""
    missing = []
    current = path
    while not current.exists():
        missing.append(current)
        current = current.parent
    for directory in reversed(missing):
        directory.mkdir(mode=mode)
        os.chmod(directory, mode)
        if run_as is not None:
            _chown(directory, run_as)


def prepare_pod_dir(pod_dir: PodDir, run_as: RunAs | None = None) -> None:
    """The pod's directory: with a private group, root:<group> 0750, closed to every
    other pod whatever the modes inside; otherwise 0711 (traversable, not listable)."""
    group = run_as.private_group if run_as is not None else None
    for directory, mode in (
        (pod_dir.path, TRAVERSE if group is None else CLOSED),
        (pod_dir.volumes, TRAVERSE),
        (pod_dir.containers, TRAVERSE),
    ):
        directory.mkdir(parents=True, exist_ok=True)
        os.chmod(directory, mode)
    if group is not None:
        os.chown(pod_dir.path, 0, group, follow_symlinks=False)


def _file_owner(path: Path, mode: int, run_as: RunAs, pod_view: bool = False) -> None:
    """A file vkpy wrote for the pod (secret, configMap, token ...). With a private
    group and the pod's own filesystem, the pod's user and that group own it with the
    mode asked for (a 0400 secret reads as `-r--------`, as a kubelet's pod running as
    root sees it): the kernel keeps it unwritable, since the pod sees its directory
    only through read-only mounts (podroot.py). With a private group and no such
    view, it belongs to root and that group, readable to the pod (group read added)
    and never writable (the pod cannot write, chmod, add, remove or rename);
    otherwise the shared containers' user owns it with the mode asked for."""
    if run_as.private_group is None:
        # With an fsGroup (runtime: oci), group-readable as SetVolumeOwnership makes
        # a read-only volume's files.
        os.chmod(path, mode | (0o440 if run_as.fs_group is not None else 0))
        _chown(path, run_as)
        return
    if pod_view and run_as.uid is not None:
        os.chown(path, run_as.uid, run_as.private_group, follow_symlinks=False)
        os.chmod(path, mode & 0o777)
        return
    readable = 0o040 if mode & 0o444 else 0
    executable = 0o010 if mode & 0o111 else 0
    os.chown(path, 0, run_as.private_group, follow_symlinks=False)
    os.chmod(path, (mode & 0o755 & ~0o070) | readable | executable)


def write_volume_files(
    directory: Path, files: Iterable[VolumeFile], run_as: RunAs, pod_view: bool = False
) -> None:
    """Replace the volume's contents atomically (the kubelet's AtomicWriter scheme);
    `pod_view`: the pod has a filesystem of its own (see _file_owner). Contents equal
    to what the volume holds are not written again (volumes are resolved again every
    sync period)."""
    _makedirs(directory, 0o755)
    if _holds(directory, files):
        return
    stamp = time.strftime("..%Y_%m_%d_%H_%M_%S.", time.gmtime()) + str(time.time_ns() % 10**9)
    fresh = directory / stamp
    fresh.mkdir(mode=0o755)
    os.chmod(fresh, 0o755)  # noqa: S103 (volume contents are readable, like the kubelet's)
    tops: set[str] = set()
    for item in files:
        target = fresh / item.path
        _makedirs(target.parent, 0o755)
        fd = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o600)
        with os.fdopen(fd, "wb") as handle:
            handle.write(item.data)
        _file_owner(target, item.mode, run_as, pod_view)
        tops.add(item.path.split("/", 1)[0])
    if run_as.fs_group is not None:
        _group_directories(fresh, run_as.fs_group)
    old = os.readlink(directory / DATA_LINK) if (directory / DATA_LINK).is_symlink() else None
    swap = directory / f"{DATA_LINK}_tmp"
    with contextlib.suppress(FileNotFoundError):
        swap.unlink()
    os.symlink(stamp, swap)
    os.replace(swap, directory / DATA_LINK)
    for name in tops:
        link = directory / name
        if not link.is_symlink():
            os.symlink(f"{DATA_LINK}/{name}", link)
    for entry in os.listdir(directory):
        if entry.startswith(".."):
            continue
        if entry not in tops:
            remove_tree(directory / entry)
    if old and old != stamp:
        remove_tree(directory / old)


def _group_directories(top: Path, group: int) -> None:
    """The fsGroup's directories (runtime: oci): group-readable, setgid, as the
    kubelet's SetVolumeOwnership leaves a read-only volume's directories."""
    for base, _, _ in os.walk(top, followlinks=False):  # vkpy's fresh directories
        os.chown(base, -1, group, follow_symlinks=False)
        os.chmod(base, 0o2755)  # noqa: S103 (volume contents are readable, as the kubelet's)


def _holds(directory: Path, files: Iterable[VolumeFile]) -> bool:
    """Whether the volume's current `..data` has exactly `files` (paths and bytes)."""
    data = directory / DATA_LINK
    if not data.is_symlink():
        return False
    wanted = {item.path: item.data for item in files}
    found = 0
    for base, _, names in os.walk(data, followlinks=False):
        found += len(names)
        if found > len(wanted):
            return False
        for name in names:
            path = os.path.join(base, name)
            relative = os.path.relpath(path, data)
            if relative not in wanted or os.path.islink(path):
                return False
            with open(path, "rb") as handle:
                if handle.read() != wanted[relative]:
                    return False
    return found == len(wanted)


def materialize_volume(
    pod_dir: PodDir,
    volume: VolumeConfig,
    run_as: RunAs,
    prefixes: tuple[str, ...] = (),
    pod_view: bool = False,
) -> None:
    """Make the volume's directory (and contents) under the pod directory."""
    path = pod_dir.volume(volume.name)
    if volume.kind == "emptyDir":
        if not path.exists():
            path.mkdir(mode=0o777)
        # World-writable, as the kubelet makes it; a setgid or sticky bit set for the
        # pod (ocivolumes.py: fsGroup, tmpfs) stays.
        os.chmod(path, stat.S_IMODE(os.stat(path).st_mode) | 0o777)  # noqa: S103
        _chown(path, run_as)
    elif volume.kind == "hostPath":
        host = Path(str(volume.source.get("path", "")))
        kind = str(volume.source.get("type") or "")
        what = f"volume {volume.name!r} hostPath"
        # As root, like the kubelet's, without following links below the prefix.
        if kind == "DirectoryOrCreate" and not host.exists():
            beneath.make_dirs(*_beneath_prefix(host, prefixes, what), what)
        elif kind == "FileOrCreate" and not host.exists():
            base, rest = _beneath_prefix(host.parent, prefixes, what)
            with beneath.directory(base, rest, what, create=True) as parent:
                flags = os.O_WRONLY | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC
                os.close(os.open(host.name, flags, 0o644, dir_fd=parent))
        _check_host_type(host, kind, volume.name)
    else:
        write_volume_files(path, volume.files, run_as, pod_view)


def _beneath_prefix(path: Path, prefixes: tuple[str, ...], what: str) -> tuple[Path, str]:
    """The allowed prefix holding `path`, and the rest of `path` below it."""
    real = Path(os.path.realpath(path))
    for prefix in prefixes:
        base = Path(os.path.realpath(prefix))
        if real == base or base in real.parents:
            return base, str(real.relative_to(base))
    raise LinkRefused(f"{what}: {str(path)!r} is outside the allowed host_path_prefixes")


def _check_host_type(host: Path, kind: str, name: str) -> None:
    expectations = {
        "Directory": host.is_dir,
        "DirectoryOrCreate": host.is_dir,
        "File": host.is_file,
        "FileOrCreate": host.is_file,
        "Socket": host.is_socket,
        "CharDevice": host.is_char_device,
        "BlockDevice": host.is_block_device,
    }
    check = expectations.get(kind)
    if check is not None and not check():
        raise FileNotFoundError(f"volume {name!r}: hostPath {str(host)!r} is not a {kind}")


def volume_target(pod_dir: PodDir, volume: VolumeConfig) -> Path:
    if volume.kind == "hostPath":
        return Path(str(volume.source.get("path", "")))
    return pod_dir.volume(volume.name)


def working_dir(container: ContainerConfig) -> str:
    """The container's working directory relative to its root ("" is the root)."""
    if not container.working_dir:
        return ""
    return clean_absolute(container.working_dir, f"container {container.name!r} workingDir")


@dataclass(frozen=True)
class MountBase:
    """A mount of a container's root, as vkpy places it: its path in the root, the
    volume's directory (vkpy made it, or the admin allowed it: followed) and the
    `subPath` below it (a pod may write there: walked without following links)."""

    parts: tuple[str, ...]
    base: Path
    sub_path: str = ""
    kind: str = ""
    """The volume's kind (emptyDir, hostPath, configMap, ...)."""

    @property
    def shown(self) -> Path:
        """The directory the mount shows."""
        return self.base.joinpath(*self.sub_path.split("/")) if self.sub_path else self.base


def mount_bases(
    pod_dir: PodDir, container: ContainerConfig, volumes: dict[str, VolumeConfig]
) -> list[MountBase]:
    """The container's mounts, shallowest first."""
    found = []
    for mount in container.spec.get("volumeMounts") or []:
        relative = clean_absolute(str(mount.get("mountPath", "")), "mountPath")
        if not relative:
            raise FileNotFoundError(f"container {container.name!r} mounts over its root")
        volume = volumes[str(mount.get("name", ""))]
        base = volume_target(pod_dir, volume)
        if volume.kind == "hostPath":
            base = Path(os.path.realpath(base))  # the admin allowed it: followed
        sub_path = clean_relative(str(mount.get("subPath") or ""), "subPath")
        if sub_path and volume.kind not in ("emptyDir", "hostPath"):
            base, sub_path = base / sub_path, ""  # root's files, vkpy's links
        found.append(MountBase(tuple(relative.split("/")), base, sub_path, volume.kind))
    return sorted(found, key=lambda m: len(m.parts))


def locate(
    root: Path, mounts: Iterable[MountBase], parts: tuple[str, ...]
) -> tuple[MountBase | None, Path, str]:
    """Where `parts` (a path in the container's root) really is: the deepest mount
    above it (None: the root itself), the directory to walk from and the path below
    it, which is walked without following links (the mount's subPath included)."""
    outer = max(
        (m for m in mounts if len(m.parts) < len(parts) and parts[: len(m.parts)] == m.parts),
        key=lambda m: len(m.parts),
        default=None,
    )
    if outer is None:
        return None, root, "/".join(parts)
    rest = "/".join(p for p in (outer.sub_path, *parts[len(outer.parts) :]) if p)
    return outer, outer.base, rest


def prepare_root(
    pod_dir: PodDir,
    container: ContainerConfig,
    volumes: dict[str, VolumeConfig],
    run_as: RunAs,
    pod_view: bool = False,
    host_sub_paths: bool = True,
) -> Path:
    """Make the container's root with its mounts; returns its working directory.

    Done when the pod is created, before any of its processes runs, and for an
    ephemeral container while the pod runs: every directory, link and removal is
    made beneath a directory vkpy holds open, never through a link the pod (or
    anyone writing a volume) planted (beneath.py). A mount inside another is made
    in the directory the outer one shows (the volume itself).
    `pod_view`: the pod has a filesystem of its own (podroot.py), where each volume
    is mounted at its mount path and the host is read-only: a hostPath link then
    points at the mount path, and a mount nested in another needs no link (the
    mount is there in the pod's view).
    `host_sub_paths`: make a missing subPath of a hostPath here, `run_as`'s; False in
    `runtime: oci`, where the pod sees its hostPaths id-mapped and the subPath is made
    root's when the container's mounts are (host_paths.py), as the kubelet makes it."""
    cdir: ContainerDir = pod_dir.container(container.name)
    cdir.path.mkdir(mode=TRAVERSE, exist_ok=True)
    os.chmod(cdir.path, TRAVERSE)
    cdir.instances.mkdir(mode=PRIVATE, exist_ok=True)
    os.chmod(cdir.instances, PRIVATE)
    security = container.spec.get("securityContext") or {}
    # readOnlyRootFilesystem: the container's root and the directories vkpy makes in it
    # stay root's, so the container writes only into its (writable) volumes.
    root_owner = None if security.get("readOnlyRootFilesystem") else run_as
    name = container.name
    beneath.make_dirs(cdir.path, "root", f"container {name!r} root", 0o755, root_owner)
    root = Path(os.path.realpath(cdir.root))
    placed: list[MountBase] = []
    for mount in mount_bases(pod_dir, container, volumes):
        kind = mount.kind
        target = mount.base
        if mount.sub_path and kind == "hostPath" and not host_sub_paths:
            target = mount.shown  # only a link of the host-mode root names it
        elif mount.sub_path:
            # The pod can write here: no link it planted is followed (beneath.py).
            target = resolve_beneath(
                mount.base,
                mount.sub_path,
                f"container {name!r} subPath",
                create=True,
                mode=_sub_path_mode(mount.base) if kind == "emptyDir" else 0o755,
                owner=run_as,
            )
        outer, base, below = locate(root, placed, mount.parts)
        placed.append(mount)
        if pod_view and outer is not None:
            continue  # a mount inside another: the pod's view has it, no link is needed
        what = f"container {name!r} mount path {'/' + '/'.join(mount.parts)!r}"
        rest = below.split("/")
        with beneath.directory(
            base, "/".join(rest[:-1]), what, True, 0o755, root_owner, below
        ) as parent:
            if beneath.same_entry(parent, rest[-1], target):
                continue  # the outer mount already shows this very directory here
            if kind == "hostPath":
                points_to = "/" + "/".join(mount.parts) if pod_view else str(target)
            else:
                points_to = os.path.relpath(target, base.joinpath(*rest[:-1]))
            beneath.link_at(parent, rest[-1], points_to, below, what, replace_empty_dir=True)
    cwd = working_dir(container)
    outer, base, below = locate(root, placed, tuple(p for p in cwd.split("/") if p))
    if outer is None or below:
        beneath.make_dirs(base, below, f"container {name!r} workingDir", 0o755, root_owner)
    return cdir.root / cwd


def _sub_path_mode(volume: Path) -> int:
    """A subPath the kubelet makes in an emptyDir has the volume's mode (setgid and
    sticky bits included: 0777 on disk, 3777 on a tmpfs with an fsGroup)."""
    return stat.S_IMODE(os.stat(volume).st_mode) | 0o777


def prepare_pod(
    pod_dir: PodDir,
    pod: PodConfig,
    run_as: RunAs,
    prefixes: tuple[str, ...] = (),
    pod_view: bool = False,
    host_sub_paths: bool = True,
) -> None:
    """Everything on disk a new pod needs before its first container starts."""
    prepare_pod_dir(pod_dir, run_as)
    for volume in pod.volumes:
        materialize_volume(pod_dir, volume, run_as, prefixes, pod_view)
    by_name = {v.name: v for v in pod.volumes}
    for container in (*pod.init_containers, *pod.containers):
        prepare_root(pod_dir, container, by_name, run_as, pod_view, host_sub_paths)


def refresh_files(pod_dir: PodDir, pod: PodConfig, run_as: RunAs, pod_view: bool = False) -> None:
    """Write new contents of the file volumes (token renewal, updated objects)."""
    for volume in pod.volumes:
        if volume.kind in ("configMap", "secret", "downwardAPI", "projected"):
            write_volume_files(pod_dir.volume(volume.name), volume.files, run_as, pod_view)
