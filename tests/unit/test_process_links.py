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
import stat
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from vkpy.providers.process.beneath import LinkRefused
from vkpy.providers.process.config import RunAs
from vkpy.providers.process.layout import ContainerDir, PodDir
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
