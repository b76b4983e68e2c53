"""What a removed pod's own id leaves outside its directory (owned.py, idclaims.py,
issue 26): its files in the host's scratch directories go with it, never through a
link; what it left in a hostPath keeps its id from another pod until it is gone."""

from __future__ import annotations

import os
from pathlib import Path

from vkpy.providers.base import ContainerConfig, PodConfig, PodRef
from vkpy.providers.process.config import RunAs
from vkpy.providers.process.idclaims import HostClaims
from vkpy.providers.process.identity import IdPool
from vkpy.providers.process.owned import first_owned, remove_owned

FIRST, LAST = 920000, 920001


def pod(uid: str) -> PodConfig:
    app = ContainerConfig("app", "busybox", ("true",), ())
    spec = {"containers": [{"name": "app"}]}
    return PodConfig(PodRef("ns", uid, uid), {"spec": spec}, (), (app,))


def owned_by(path: Path, uid: int) -> Path:
    """`path` (made a file when missing) given to `uid`, links themselves included."""
    if not os.path.lexists(path):
        path.write_text("the pod's")
    os.chown(path, uid, uid, follow_symlinks=False)
    return path


def test_the_pods_files_go_and_links_are_not_followed(tmp_path: Path) -> None:
    scratch = tmp_path / "tmp"
    scratch.mkdir()
    host = tmp_path / "host"
    host.mkdir()
    owned_by(host / "keep", FIRST)  # outside the scratch directory: never reached
    owned_by(scratch / "file", FIRST)
    made = scratch / "dir"
    made.mkdir()
    (made / "inner").write_text("y")
    owned_by(made, FIRST)
    (scratch / "link").symlink_to(host)
    owned_by(scratch / "link", FIRST)
    (scratch / "other").symlink_to(host)  # root's link to a directory with the id's file
    shared = scratch / "shared"
    shared.mkdir()
    owned_by(shared / "mine", FIRST)
    (shared / "theirs").write_text("w")
    assert remove_owned(str(scratch), frozenset({FIRST})) == 4
    assert sorted(p.name for p in scratch.iterdir()) == ["other", "shared"]
    assert [p.name for p in shared.iterdir()] == ["theirs"]
    assert (host / "keep").read_text() == "the pod's"


def test_a_hostpath_the_pod_wrote_keeps_its_id_from_other_pods(tmp_path: Path) -> None:
    claims = HostClaims(tmp_path / "claims", grace=0)
    ids = IdPool(FIRST, LAST, True, RunAs(None, None), claims)
    hostpath = tmp_path / "hostpath"
    hostpath.mkdir(mode=0o777)
    first = ids.allocate(pod("a"), "n1", tmp_path / "a")
    assert first.own is not None
    written = owned_by(hostpath / "data", first.own)
    assert first_owned([str(hostpath)], frozenset({first.own})) == str(written)
    ids.release("a", [str(hostpath)])
    # The node's own pool and another node's (same host) both pass over the id.
    again = ids.allocate(pod("b"), "n1", tmp_path / "b")
    other = IdPool(FIRST, LAST, True, RunAs(None, None), claims)
    assert again.own != first.own
    ids.release("b")
    third = other.allocate(pod("c"), "n2", tmp_path / "c")
    assert third.own != first.own
    other.release("c")
    written.unlink()  # nothing of it is left: the id is free again
    assert other.allocate(pod("d"), "n2", tmp_path / "d").own == first.own


def test_a_pod_that_left_nothing_frees_its_id(tmp_path: Path) -> None:
    claims = HostClaims(tmp_path / "claims", grace=0)
    ids = IdPool(FIRST, LAST, True, RunAs(None, None), claims)
    hostpath = tmp_path / "hostpath"
    hostpath.mkdir()
    first = ids.allocate(pod("a"), "n1", tmp_path / "a")
    ids.release("a", [str(hostpath)])
    assert ids.allocate(pod("b"), "n1", tmp_path / "b").own == first.own
