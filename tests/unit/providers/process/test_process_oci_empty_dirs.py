"""A `runtime: oci` pod's emptyDirs on disk (ocivolumes.prepare_empty_dirs): owned by
the pod's root and fsGroup as host ids of its range, with the kubelet's modes; a link
planted where a volume goes is refused, never followed. Runs as root, as CI does (the
owners are host ids of a pod's range)."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from vkpy.providers.base import PodConfig, PodRef, VolumeConfig
from vkpy.providers.process import ocivolumes
from vkpy.providers.process.beneath import LinkRefused
from vkpy.providers.process.idranges import PodRange
from vkpy.providers.process.layout import PodDir

IDS = PodRange(slot=2, base=1_131_072, size=65536)


def pod(fs_group: int | None = None) -> PodConfig:
    security = {} if fs_group is None else {"fsGroup": fs_group}
    return PodConfig(
        ref=PodRef("ns", "p", "u"),
        pod={"spec": {"securityContext": security}},
        init_containers=(),
        containers=(),
        volumes=(VolumeConfig("scratch", "emptyDir"), VolumeConfig("conf", "configMap")),
    )


def test_an_empty_dir_belongs_to_the_pods_root_with_the_kubelets_mode(tmp_path: Path) -> None:
    pod_dir = PodDir(tmp_path / "pod")
    ocivolumes.prepare_empty_dirs(pod(), pod_dir, IDS)
    made = os.stat(pod_dir.volume("scratch"))
    assert (made.st_uid, made.st_gid) == (IDS.base, IDS.base)
    assert stat.S_IMODE(made.st_mode) == 0o777
    assert not pod_dir.volume("conf").exists()  # only emptyDirs are made here
    assert stat.S_IMODE(os.stat(pod_dir.volumes).st_mode) == 0o711


def test_with_an_fs_group_the_empty_dir_is_its_group_and_setgid(tmp_path: Path) -> None:
    pod_dir = PodDir(tmp_path / "pod")
    ocivolumes.prepare_empty_dirs(pod(fs_group=2000), pod_dir, IDS)
    made = os.stat(pod_dir.volume("scratch"))
    assert (made.st_uid, made.st_gid) == (IDS.base, IDS.base + 2000)
    assert stat.S_IMODE(made.st_mode) == 0o2777


def test_a_link_where_the_volume_goes_is_refused_and_its_target_untouched(
    tmp_path: Path,
) -> None:
    pod_dir = PodDir(tmp_path / "pod")
    pod_dir.volumes.mkdir(parents=True)
    target = tmp_path / "host-dir"
    target.mkdir(mode=0o700)
    (pod_dir.volumes / "scratch").symlink_to(target)
    with pytest.raises(LinkRefused):
        ocivolumes.prepare_empty_dirs(pod(), pod_dir, IDS)
    kept = os.stat(target)
    assert (kept.st_uid, stat.S_IMODE(kept.st_mode)) == (os.getuid(), 0o700)
