"""Pod directories: atomic volume writes, container roots with mount links, and what
the process backend refuses to run."""

import os
from pathlib import Path

import pytest

from vkpy.providers.base import ContainerConfig, PodConfig, PodRef, VolumeConfig, VolumeFile
from vkpy.providers.errors import InvalidInputError, UnsupportedError
from vkpy.providers.process.config import RunAs, blocked_ancestor
from vkpy.providers.process.filesystem import prepare_pod, write_volume_files
from vkpy.providers.process.layout import PodDir
from vkpy.providers.process.validation import check_pod, clean_absolute, clean_relative

ME = RunAs(None, None)


def test_volume_files_are_swapped_atomically(tmp_path: Path) -> None:
    volume = tmp_path / "v"
    write_volume_files(
        volume, [VolumeFile("token", b"one", 0o644), VolumeFile("a/b", b"x", 0o400)], ME
    )
    assert (volume / "token").read_bytes() == b"one"
    assert os.readlink(volume / "token") == "..data/token"
    assert (volume / "a/b").read_bytes() == b"x"
    assert oct((volume / "a/b").stat().st_mode & 0o777) == "0o400"
    first = os.readlink(volume / "..data")
    write_volume_files(volume, [VolumeFile("token", b"two", 0o644)], ME)
    assert (volume / "token").read_bytes() == b"two"
    assert not (volume / "a").exists()  # gone from the new contents
    assert not (volume / first).exists()  # the old generation is removed
    assert sorted(os.listdir(volume)) == sorted(["..data", os.readlink(volume / "..data"), "token"])


def test_the_same_contents_are_not_written_again(tmp_path: Path) -> None:
    """Volumes are resolved again every sync period: unchanged ones keep their files."""
    volume = tmp_path / "v"
    files = [VolumeFile("key", b"one", 0o644), VolumeFile("dir/deep", b"x", 0o644)]
    write_volume_files(volume, files, ME)
    first = os.readlink(volume / "..data")
    write_volume_files(volume, list(files), ME)
    assert os.readlink(volume / "..data") == first
    write_volume_files(volume, [*files, VolumeFile("more", b"", 0o644)], ME)
    assert os.readlink(volume / "..data") != first
    assert (volume / "more").read_bytes() == b""


def pod(container: ContainerConfig, *volumes: VolumeConfig) -> PodConfig:
    return PodConfig(PodRef("ns", "p", "uid"), {}, (), (container,), volumes)


def container(**spec: object) -> ContainerConfig:
    working_dir = spec.pop("workingDir", None)
    return ContainerConfig(
        "app",
        "img",
        ("sh",),
        (),
        working_dir=working_dir,
        spec=dict(spec),  # type: ignore[arg-type]
    )


def test_container_root_links_mounts_relatively(tmp_path: Path) -> None:
    host = tmp_path / "host"
    host.mkdir()
    mounts = [
        {"name": "cfg", "mountPath": "/etc/app"},
        {"name": "cfg", "mountPath": "/one", "subPath": "key"},
        {"name": "scratch", "mountPath": "/data"},
        {"name": "scratch", "mountPath": "/data/cache", "subPath": "cache"},
        {"name": "host", "mountPath": "/host"},
    ]
    spec = pod(
        container(volumeMounts=mounts, workingDir="/srv/app"),
        VolumeConfig("cfg", "configMap", files=(VolumeFile("key", b"v"),)),
        VolumeConfig("scratch", "emptyDir"),
        VolumeConfig("host", "hostPath", source={"path": str(host), "type": "Directory"}),
    )
    pod_dir = PodDir(tmp_path / "pods" / "uid")
    prepare_pod(pod_dir, spec, ME)
    root = pod_dir.container("app").root
    assert (root / "etc/app/key").read_bytes() == b"v"
    assert os.readlink(root / "etc/app") == "../../../../volumes/cfg"
    assert (root / "one").read_bytes() == b"v"
    (root / "data/cache/file").write_text("x")
    assert (pod_dir.volume("scratch") / "cache/file").read_text() == "x"
    assert os.readlink(root / "host") == str(host)
    assert (root / "srv/app").is_dir()
    assert oct(pod_dir.volume("scratch").stat().st_mode & 0o777) == "0o777"
    assert oct(pod_dir.container("app").instances.stat().st_mode & 0o777) == "0o700"


@pytest.mark.parametrize(
    ("spec", "volumes", "error", "reason", "words"),
    [
        ({}, (), InvalidInputError, "NoCommand", "has no command"),
        (
            {"volumeMounts": [{"name": "x", "mountPath": "/x"}]},
            (),
            InvalidInputError,
            "InvalidMount",
            "does not have",
        ),
        (
            {},
            (VolumeConfig("data", "persistentVolumeClaim", source={"claimName": "c"}),),
            UnsupportedError,
            "UnsupportedVolume",
            "persistentVolumeClaim",
        ),
        (
            {},
            (VolumeConfig("etc", "hostPath", source={"path": "/etc"}),),
            UnsupportedError,
            "UnsupportedVolume",
            "host_path_prefixes",
        ),
        (
            {},
            (VolumeConfig("b", "projected", source={"sources": [{"clusterTrustBundle": {}}]}),),
            UnsupportedError,
            "UnsupportedVolume",
            "clusterTrustBundle",
        ),
        (
            {"lifecycle": {"preStop": {"tcpSocket": {"port": 1}}}},
            (),
            UnsupportedError,
            "UnsupportedProbe",
            "tcpSocket",
        ),
        (
            {"volumeMounts": [{"name": "e", "mountPath": "relative"}]},
            (VolumeConfig("e", "emptyDir"),),
            InvalidInputError,
            "InvalidPath",
            "must be absolute",
        ),
        (
            {"volumeMounts": [{"name": "e", "mountPath": "/x", "subPath": "../.."}]},
            (VolumeConfig("e", "emptyDir"),),
            InvalidInputError,
            "InvalidPath",
            "without '..'",
        ),
        (
            {"resources": {"limits": {"memory": "lots"}}},
            (),
            InvalidInputError,
            "InvalidLimit",
            "invalid quantity",
        ),
    ],
)
def test_pods_the_backend_refuses(
    spec: dict[str, object],
    volumes: tuple[VolumeConfig, ...],
    error: type[Exception],
    reason: str,
    words: str,
) -> None:
    command = () if reason == "NoCommand" else ("sh",)
    config = ContainerConfig("app", "busybox", command, (), spec=spec)
    with pytest.raises(error, match=words) as caught:
        check_pod(pod(config, *volumes), host_path_prefixes=("/srv",))
    assert caught.value.reason == reason  # type: ignore[attr-defined]


def test_host_paths_under_an_allowed_prefix_pass(tmp_path: Path) -> None:
    inside = tmp_path / "data"
    config = container(volumeMounts=[{"name": "h", "mountPath": "/h"}])
    check_pod(
        pod(config, VolumeConfig("h", "hostPath", source={"path": str(inside)})),
        host_path_prefixes=(str(tmp_path),),
    )
    (tmp_path / "escape").symlink_to("/etc")
    with pytest.raises(UnsupportedError):
        check_pod(
            pod(config, VolumeConfig("h", "hostPath", source={"path": str(tmp_path / "escape")})),
            host_path_prefixes=(str(tmp_path),),
        )


def test_path_cleaning() -> None:
    assert clean_absolute("/etc/app/", "m") == "etc/app"
    assert clean_absolute("/", "m") == ""
    assert clean_relative("a/./b", "s") == "a/b"
    assert clean_relative("", "s") == ""


def test_blocked_ancestor(tmp_path: Path) -> None:
    closed = tmp_path / "closed"
    (closed / "pods").mkdir(parents=True)
    closed.chmod(0o700)
    nobody = RunAs(65534, 65534, (65534,))
    assert blocked_ancestor(closed / "pods", ME) is None
    if all(os.stat(p).st_mode & 0o001 for p in [tmp_path, *tmp_path.parents]):
        assert blocked_ancestor(closed / "pods", nobody) == closed


def test_a_file_volumes_mount_point_is_a_file(tmp_path: Path) -> None:
    """The pod's holder makes every mount point before its containers start: a
    hostPath of a file (the node's /etc/hosts in the KubeletManagedEtcHosts spec) and
    a configMap key by subPath need a file there, a directory volume a directory."""
    from vkpy.providers.process.sandbox import mountpoints  # noqa: PLC0415

    host_file = tmp_path / "hosts"
    host_file.write_text("127.0.0.1 localhost\n")
    host_dir = tmp_path / "dir"
    host_dir.mkdir()
    volumes = (
        VolumeConfig("file", "hostPath", {"path": str(host_file), "type": "FileOrCreate"}),
        VolumeConfig("dir", "hostPath", {"path": str(tmp_path)}),
        VolumeConfig("new", "hostPath", {"path": str(tmp_path / "new"), "type": "FileOrCreate"}),
        VolumeConfig("conf", "configMap", {}, (VolumeFile("key", b"v", 0o644),)),
        VolumeConfig("scratch", "emptyDir"),
    )
    mounts = [
        {"name": "file", "mountPath": "/etc/hosts-original"},
        {"name": "dir", "mountPath": "/host"},
        {"name": "dir", "mountPath": "/host-hosts", "subPath": "hosts"},
        {"name": "dir", "mountPath": "/host-dir", "subPath": "dir"},
        {"name": "new", "mountPath": "/created"},
        {"name": "conf", "mountPath": "/etc/key", "subPath": "key"},
        {"name": "conf", "mountPath": "/etc/conf"},
        {"name": "scratch", "mountPath": "/scratch"},
    ]
    layout = PodDir(tmp_path / "pod")
    found = dict(mountpoints(layout, pod(container(volumeMounts=mounts), *volumes)))  # type: ignore[arg-type]
    assert found == {
        "/etc/hosts-original": False,
        "/host": True,
        "/host-hosts": False,
        "/host-dir": True,
        "/created": False,
        "/etc/key": False,
        "/etc/conf": True,
        "/scratch": True,
    }
