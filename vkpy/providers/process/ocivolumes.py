"""A pod's volumes in `runtime: oci`, owned as the kubelet gives them to a pod in a
user namespace of its own.

In `runtime: oci` a pod's ids 0-65535 are a host range of its own (idranges.py):
anything vkpy writes as the host's root is `nobody` inside the pod, and a 0400 secret
of the host's root is unreadable to the pod's root. So the pod's volumes belong to
the pod's root (the range's first host id), their group is the pod's fsGroup mapped
into the range when the pod has one (else the pod's root group), and the modes are
exactly those the pod asked for (`defaultMode`, `items[].mode`); with an fsGroup,
the kubelet's SetVolumeOwnership rules apply on top: files group-readable, their
directories and emptyDirs setgid (new files there take the fsGroup).
`volume_owner` is what filesystem.py writes with (the one hook: Runtime.volume_owner).

emptyDir is 0777 on disk; `medium: Memory` is a tmpfs mounted for the pod (mode 1777
as the kubelet's tmpfs, `sizeLimit` as its size), bound into every container that
mounts it, and unmounted when the pod is removed. The mount is made through a
descriptor opened beneath the pod's volume directory (beneath.py), never at a path a
link could redirect.
"""

from __future__ import annotations

import os
import stat

from vkpy.providers.base import PodConfig, VolumeConfig
from vkpy.providers.process import beneath, mountcalls, sandbox
from vkpy.providers.process.config import RunAs
from vkpy.providers.process.idranges import PodRange
from vkpy.providers.process.layout import PodDir

EMPTY_DIR_MODE = 0o777
TMPFS_MODE = 0o1777
"""A fresh tmpfs's root, as the kubelet's Memory emptyDir shows it (sticky)."""
SETGID = 0o2000
MS_NOSUID = 0x2
MS_NODEV = 0x4


def fs_group(pod: PodConfig) -> int | None:
    value = ((pod.pod.get("spec") or {}).get("securityContext") or {}).get("fsGroup")
    return None if value is None else int(str(value))


def volume_owner(pod: PodConfig, ids: PodRange) -> RunAs:
    """Who owns the pod's volumes on the host: the pod's root, and its fsGroup (when
    set) as the group, all as host ids of the pod's range (ValueError outside it)."""
    group = fs_group(pod)
    host_group = ids.base if group is None else ids.host_id(group)
    return RunAs(
        ids.base,
        host_group,
        name="the pod's root",
        fs_group=None if group is None else host_group,
    )


def is_memory(volume: VolumeConfig) -> bool:
    return volume.kind == "emptyDir" and str(volume.source.get("medium") or "") == "Memory"


def prepare_empty_dirs(pod: PodConfig, pod_dir: PodDir, ids: PodRange) -> None:
    """The pod's emptyDirs before its containers exist: a directory (a tmpfs for
    `medium: Memory`) of the pod's root and fsGroup with the kubelet's mode; the
    directories above are traversable for runc's init, which binds them inside the
    pod's user namespace."""
    owner = volume_owner(pod, ids)
    for place in (pod_dir.path, pod_dir.volumes):
        place.mkdir(mode=0o711, exist_ok=True)
        os.chmod(place, 0o711)  # noqa: S103 (traversable, not listable)
    for volume in pod.volumes:
        if volume.kind != "emptyDir":
            continue
        what = f"volume {volume.name!r}"
        beneath.make_dirs(pod_dir.volumes, volume.name, what, EMPTY_DIR_MODE)
        mode = EMPTY_DIR_MODE
        if is_memory(volume):
            _mount_tmpfs(pod_dir, volume, owner)
            mode = TMPFS_MODE
        if owner.fs_group is not None:
            mode |= SETGID
        # a descriptor that can be changed (open_path's O_PATH one cannot: EBADF)
        with beneath.directory(pod_dir.volumes, volume.name, what) as fd:
            os.fchown(fd, ids.base, owner.gid if owner.gid is not None else ids.base)
            os.fchmod(fd, mode)


def _mount_tmpfs(pod_dir: PodDir, volume: VolumeConfig, owner: RunAs) -> None:
    target = pod_dir.volume(volume.name)
    if os.path.ismount(target):
        return  # mounted before (vkpy restarted while creating the pod)
    options = [f"mode={TMPFS_MODE:o}", f"uid={owner.uid}", f"gid={owner.gid}"]
    size = sandbox.memory_size(volume)  # as host mode sizes its tmpfs
    if size is not None:
        options.append(f"size={size}")
    fd = beneath.open_path(pod_dir.volumes, volume.name, f"volume {volume.name!r}")
    try:
        if not stat.S_ISDIR(os.fstat(fd).st_mode):
            raise FileNotFoundError(f"volume {volume.name!r}: not a directory")
        mountcalls.mount(
            "tmpfs", f"/proc/self/fd/{fd}", "tmpfs", MS_NOSUID | MS_NODEV, ",".join(options)
        )
    finally:
        os.close(fd)
