"""Links a pod plants in the directories it can write are never followed by vkpy (issue 26).

vkpy runs as root; a pod owns its container root (and its emptyDirs, and may write a
hostPath). Whatever the pod puts at a component of a path vkpy then works on (a link to
a file, to a directory, to `/`, a dangling link, a link swapped in between two runs),
nothing outside the pod's directory is created, changed, chowned or removed, and the
pod is told why its path cannot be honoured. On the real filesystem, as root when the
tests are (ownership is then checked too).
"""

from __future__ import annotations

import os
import shutil
import stat
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests.unit.providers.process.test_process_provider import (
    MOUNT,
    OUT,
    REF,
    container,
    make,
    out,
    pod,
    until,
)
from vkpy.providers.base import (
    ContainerConfig,
    ContainerState,
    PodConfig,
    PodRef,
    PodState,
    VolumeConfig,
)
from vkpy.providers.errors import InvalidInputError
from vkpy.providers.process import podmounts
from vkpy.providers.process.beneath import LinkRefused
from vkpy.providers.process.config import ProcessConfig, RunAs
from vkpy.providers.process.ephemeral import prepare_ephemeral_root
from vkpy.providers.process.filesystem import (
    materialize_volume,
    mount_bases,
    prepare_pod_dir,
    prepare_root,
)
from vkpy.providers.process.layout import ContainerDir, PodDir
from vkpy.providers.process.provider import ProcessProvider
from vkpy.providers.process.sandbox import container_mounts
from vkpy.providers.process.termination import prepare_message_file

ROOT = os.geteuid() == 0
POD = RunAs(uid=65534, gid=65534) if ROOT else RunAs(uid=None, gid=None)


@dataclass
class Host:
    """A directory outside the pod's, with a root-only file, as a host's /etc."""

    path: Path

    @property
    def secret(self) -> Path:
        return self.path / "termination-log"

    def snapshot(self) -> dict[str, tuple[int, int, int, int, bytes]]:
        """Every entry below the directory: mode, owner, group, inode, contents."""
        found = {}
        for base, dirs, files in os.walk(self.path):
            for name in dirs + files:
                path = os.path.join(base, name)
                info = os.lstat(path)
                data = Path(path).read_bytes() if stat.S_ISREG(info.st_mode) else b""
                found[os.path.relpath(path, self.path)] = (
                    info.st_mode,
                    info.st_uid,
                    info.st_gid,
                    info.st_ino,
                    data,
                )
        info = os.lstat(self.path)
        found["."] = (info.st_mode, info.st_uid, info.st_gid, info.st_ino, b"")
        return found


@pytest.fixture
def host(tmp_path: Path) -> Host:
    outside = Host(tmp_path / "host-etc")
    outside.path.mkdir(mode=0o700)
    outside.secret.write_text("root's own\n")
    outside.secret.chmod(0o600)
    return outside


def pod_container(tmp_path: Path) -> ContainerDir:
    """A container directory as vkpy makes it: root's, with a root the pod owns."""
    cdir = PodDir(tmp_path / "pods" / "uid").container("app")
    cdir.root.mkdir(parents=True)
    if POD.uid is not None:
        os.chown(cdir.root, POD.uid, POD.gid or -1)
    return cdir


# --- the two reproductions of the issue ---------------------------------------------


def test_a_dev_link_to_a_host_directory_does_not_delete_its_file(
    tmp_path: Path, host: Host
) -> None:
    """Pod `tmsg`: `rm -rf dev && ln -s <host dir> dev`, then restarted."""
    cdir = pod_container(tmp_path)
    spec: dict[str, Any] = {"name": "app"}
    prepare_message_file(cdir, spec, POD)  # the first run
    before = host.snapshot()
    (cdir.root / "dev" / "termination-log").unlink()
    (cdir.root / "dev").rmdir()
    (cdir.root / "dev").symlink_to(host.path)
    refused = "terminationMessagePath: 'dev' in 'dev/termination-log' is a symbolic link"
    with pytest.raises(LinkRefused, match=refused):
        prepare_message_file(cdir, spec, POD)  # the restart
    assert host.snapshot() == before
    assert host.secret.read_text() == "root's own\n"
    assert not host.secret.is_symlink()


def test_a_link_on_a_custom_path_makes_no_directory_where_it_points(
    tmp_path: Path, host: Host
) -> None:
    """Pod `tmsg2`: message path /m/sub/dir/termination-log with `m -> <host dir>`."""
    cdir = pod_container(tmp_path)
    spec = {"name": "app", "terminationMessagePath": "/m/sub/dir/termination-log"}
    before = host.snapshot()
    (cdir.root / "m").symlink_to(host.path)
    with pytest.raises(LinkRefused, match="'m' in 'm/sub/dir/termination-log' is a symbolic link"):
        prepare_message_file(cdir, spec, POD)
    assert host.snapshot() == before
    assert not (host.path / "sub").exists()


# --- every operation, a link at every component ----------------------------------------


@dataclass
class Case:
    """One operation vkpy does as root in a directory the pod can write: `run(pod)`
    acts on the pod (a PodDir); `writable(pod)` is the directory the pod writes (its
    container root, an emptyDir, a hostPath); `path` the path vkpy works on there,
    whose every component gets a link; `replaces_last`: a link at the last component
    is the pod's own entry, replaced (a link made there), not refused."""

    name: str
    path: str
    run: Callable[[PodDir, Path], object]
    writable: Callable[[PodDir, Path], Path]
    replaces_last: bool
    refused: type[OSError] = LinkRefused
    first: Callable[[PodDir, Path], object] | None = None
    """What makes the path before the first run (default: `run` itself)."""


def _root(pod: PodDir, hostpath: Path) -> Path:
    return pod.container("app").root


def _volume(pod: PodDir, hostpath: Path) -> Path:
    return pod.volume("cache")


def _hostpath(pod: PodDir, hostpath: Path) -> Path:
    return hostpath


def _container(name: str = "app", **spec: Any) -> ContainerConfig:
    return ContainerConfig(
        name, "busybox", ("true",), (), working_dir=spec.pop("workingDir", None), spec=spec
    )


def _volumes(hostpath: Path) -> dict[str, VolumeConfig]:
    return {
        "cache": VolumeConfig("cache", "emptyDir"),
        "data": VolumeConfig("data", "hostPath", {"path": str(hostpath)}),
        "conf": VolumeConfig("conf", "emptyDir"),
    }


def _message(pod: PodDir, hostpath: Path) -> None:
    spec = {"name": "app", "terminationMessagePath": "/t1/t2/termination-log"}
    prepare_message_file(pod.container("app"), spec, POD)


def _message_in_volume(pod: PodDir, hostpath: Path) -> None:
    container = _container(volumeMounts=[{"name": "cache", "mountPath": "/q"}])
    container.spec["terminationMessagePath"] = "/q/q1/q2/msg"
    mounts = mount_bases(pod, container, _volumes(hostpath))
    prepare_message_file(pod.container("app"), container.spec, POD, mounts)


def _mount_in_root(pod: PodDir, hostpath: Path) -> None:
    mounts = [{"name": "conf", "mountPath": "/r1/r2/conf"}]
    prepare_root(pod, _container(volumeMounts=mounts), _volumes(hostpath), POD)


def _nested_in_hostpath(pod: PodDir, hostpath: Path) -> None:
    mounts = [
        {"name": "data", "mountPath": "/data"},
        {"name": "conf", "mountPath": "/data/h1/h2/conf"},
    ]
    prepare_root(pod, _container(volumeMounts=mounts), _volumes(hostpath), POD)


def _nested_in_empty_dir(pod: PodDir, hostpath: Path) -> None:
    """An ephemeral container (`kubectl debug`) added while the pod runs: its mount
    inside the emptyDir the pod has written."""
    mounts = [
        {"name": "cache", "mountPath": "/cache"},
        {"name": "conf", "mountPath": "/cache/e1/e2/conf"},
    ]
    container = _container("debug", volumeMounts=mounts)
    volumes = tuple(_volumes(hostpath).values())
    pod_config = PodConfig(PodRef("default", "p", "uid"), {}, (), (), volumes)
    prepare_ephemeral_root(pod, pod_config, container, POD, False)


def _working_dir_in_hostpath(pod: PodDir, hostpath: Path) -> None:
    mounts = [{"name": "data", "mountPath": "/data"}]
    container = _container(volumeMounts=mounts, workingDir="/data/w1/w2")
    prepare_root(pod, container, _volumes(hostpath), POD)


def _sub_path_in_empty_dir(pod: PodDir, hostpath: Path) -> None:
    mounts = [{"name": "cache", "mountPath": "/s", "subPath": "s1/s2"}]
    prepare_root(pod, _container(volumeMounts=mounts), _volumes(hostpath), POD)


def _sub_path_in_hostpath(pod: PodDir, hostpath: Path) -> None:
    mounts = [{"name": "data", "mountPath": "/s", "subPath": "p1/p2"}]
    prepare_root(pod, _container(volumeMounts=mounts), _volumes(hostpath), POD)


def _opened_for_mounting(volume: str, mount: dict[str, Any]) -> Callable[[PodDir, Path], None]:
    """What each start of a container does with a pod filesystem (podmounts.py): the
    volume opened, in the container's process, before it is attached."""

    def run(pod: PodDir, hostpath: Path) -> None:
        container = _container(volumeMounts=[{"name": volume, **mount}])
        pod_config = PodConfig(REF, {}, (), (container,), tuple(_volumes(hostpath).values()))
        (entry, _) = container_mounts(pod, pod_config, container, (str(hostpath),))
        os.close(podmounts._walk(entry[0], entry[1]))

    return run


CASES = [
    Case("termination message", "t1/t2/termination-log", _message, _root, True),
    Case("termination message in an emptyDir", "q1/q2/msg", _message_in_volume, _volume, True),
    Case("mount path in the root", "r1/r2/conf", _mount_in_root, _root, True),
    Case("mount inside a hostPath", "h1/h2/conf", _nested_in_hostpath, _hostpath, True),
    Case("ephemeral mount in an emptyDir", "e1/e2/conf", _nested_in_empty_dir, _volume, True),
    Case("workingDir in a hostPath", "w1/w2", _working_dir_in_hostpath, _hostpath, False),
    Case("subPath in an emptyDir", "s1/s2", _sub_path_in_empty_dir, _volume, False),
    Case("subPath in a hostPath", "p1/p2", _sub_path_in_hostpath, _hostpath, False),
    Case(
        "hostPath opened to be mounted",
        "v1/v2",
        _opened_for_mounting("data", {"mountPath": "/v", "subPath": "v1/v2"}),
        _hostpath,
        False,
        podmounts.MountRefused,
        lambda pod, hostpath: (hostpath / "v1/v2").mkdir(parents=True),
    ),
    Case(
        "emptyDir subPath opened to be mounted",
        "m1/m2",
        _opened_for_mounting("cache", {"mountPath": "/m", "subPath": "m1/m2"}),
        _volume,
        False,
        podmounts.MountRefused,
        lambda pod, hostpath: (pod.volume("cache") / "m1/m2").mkdir(parents=True),
    ),
]
LINKS = ["to a file", "to a directory", "to /", "dangling", "swapped between runs"]


def _prepared_pod(tmp_path: Path) -> tuple[PodDir, Path]:
    """A pod as vkpy made it (directory, root, volumes) and a hostPath it may write."""
    pod = PodDir(tmp_path / "pods" / "uid")
    prepare_pod_dir(pod)
    for name in ("cache", "conf"):
        materialize_volume(pod, VolumeConfig(name, "emptyDir"), POD)
    pod_container(tmp_path)
    hostpath = tmp_path / "hostpath"
    hostpath.mkdir(mode=0o777)
    return pod, hostpath


@pytest.mark.parametrize("link", LINKS)
@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_no_planted_link_is_followed(tmp_path: Path, host: Host, case: Case, link: str) -> None:
    parts = case.path.split("/")
    for depth in range(1, len(parts) + 1):
        where = tmp_path / f"at-{depth}"
        where.mkdir()
        pod, hostpath = _prepared_pod(where)
        writable = case.writable(pod, hostpath)
        planted = writable.joinpath(*parts[:depth])
        if link == "swapped between runs":
            (case.first or case.run)(pod, hostpath)  # the path is made, nothing planted
            case.run(pod, hostpath)  # a first run that works
            _remove(planted)
        planted.parent.mkdir(parents=True, exist_ok=True)
        # A name of this test's own below the link: made at / if the link were followed.
        below = parts[depth] if depth < len(parts) else ""
        points_to = {
            "to a file": host.secret,
            "to /": Path("/"),
            "dangling": host.path / "missing",
        }.get(link, host.path)
        planted.symlink_to(points_to)
        before = host.snapshot()
        assert not below or not Path("/", below).exists()
        last = depth == len(parts)
        if last and case.replaces_last:
            case.run(pod, hostpath)  # the pod's own link is replaced by vkpy's
            assert not planted.is_symlink() or os.readlink(planted) != str(points_to)
        else:
            refused = f"'{parts[depth - 1]}' in '.*' is a symbolic"
            with pytest.raises(case.refused, match=refused):
                case.run(pod, hostpath)
        assert host.snapshot() == before, (case.name, link, depth)
        assert not (host.path / "missing").exists()
        assert not below or not Path("/", below).exists(), (case.name, link, depth)


def _remove(path: Path) -> None:
    if path.is_symlink() or path.is_file():
        path.unlink()
    elif path.is_dir():
        shutil.rmtree(path)


# --- through the provider, with real processes -----------------------------------------


def _cannot_run(state: PodState) -> ContainerState | None:
    (app,) = state.containers
    for seen in (app, app.last_terminated):
        if seen is not None and seen.reason == "ContainerCannotRun":
            return seen
    return None


async def test_a_restarted_container_behind_a_planted_dev_link_is_told_why(
    tmp_path: Path, host: Host
) -> None:
    """The first reproduction through the provider: the container itself plants the
    link and fails; the restart is refused with the reason, the host file survives."""
    provider = make(tmp_path / "node")
    await provider.start()
    before = host.snapshot()
    script = (
        "if [ -e planted ]; then sleep 60; fi; touch planted; "
        f"rm -rf dev && ln -s {host.path} dev; exit 1"
    )
    try:
        await provider.create_pod(pod(container("app", script), policy="Always"))
        state = await until(provider, lambda s: _cannot_run(s) is not None)
        refused = _cannot_run(state)
        assert refused is not None and refused.message is not None
        assert "'dev' in 'dev/termination-log' is a symbolic link" in refused.message
        assert host.snapshot() == before
    finally:
        await provider.delete_pod(REF, 0)
        await provider.close()
    assert host.snapshot() == before


@pytest.mark.parametrize("pod_filesystem", [False, True])
async def test_a_debug_container_mounting_through_a_planted_link_touches_no_host_file(
    tmp_path: Path, host: Host, pod_filesystem: bool
) -> None:
    """`kubectl debug` while the pod runs: a mount inside the pod's emptyDir, where the
    pod has planted a link. With links in the pod's directory (no pod filesystem) it
    is refused with the reason; with a pod filesystem the mount is made in the debug
    container's own view only. Either way nothing is made where the link points."""
    settings = {"runtime": "host", "backoff_base_seconds": 0.2, "pod_filesystem": pod_filesystem}
    config = ProcessConfig.from_dict(
        settings, state_dir=str(tmp_path / "node"), internal_ip="127.0.0.1"
    )
    provider = ProcessProvider(config)
    await provider.start()
    before = host.snapshot()
    try:
        app = container("app", f"ln -s {host.path} out/e1 && sleep 60", **MOUNT)
        conf = VolumeConfig("conf", "emptyDir")
        await provider.create_pod(pod(app, volumes=(OUT, conf)))
        links = out(tmp_path / "node") / "e1"
        await until(provider, lambda s: s.phase == "Running" and links.is_symlink())
        mounts = [
            {"name": "out", "mountPath": "/out"},
            {"name": "conf", "mountPath": "/out/e1/conf"},
        ]
        spec = {"name": "dbg", "image": "busybox", "volumeMounts": mounts}
        dbg = ContainerConfig("dbg", "busybox", ("true",), (), spec=spec)
        if pod_filesystem:
            await provider.run_ephemeral_containers(REF, [dbg])
            await until(provider, lambda s: _ephemeral_ended(s, "dbg"))
        else:
            refused = "'e1' in 'e1/conf' is a symbolic link"
            with pytest.raises(InvalidInputError, match=refused):
                await provider.run_ephemeral_containers(REF, [dbg])
        assert host.snapshot() == before
    finally:
        await provider.delete_pod(REF, 0)
        await provider.close()
    assert host.snapshot() == before


def _ephemeral_ended(state: PodState, name: str) -> bool:
    return any(c.name == name and c.state == "terminated" for c in state.ephemeral_containers)
