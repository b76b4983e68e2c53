"""Paths inside directories a pod can write, resolved without following its links
(beneath.py): the hostPath/subPath escape of issue 12, finding 2."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from vkpy.providers.process.beneath import LinkRefused, chown_file, place_link, resolve_beneath
from vkpy.providers.process.config import RunAs


def test_a_planted_link_is_refused_and_nothing_is_made_where_it_points(tmp_path: Path) -> None:
    volume = tmp_path / "volume"
    volume.mkdir()
    outside = tmp_path / "outside"
    outside.mkdir()
    (volume / "z").symlink_to(outside)
    with pytest.raises(LinkRefused, match="symbolic link"):
        resolve_beneath(volume, "z/conf.d", "subPath", create=True)
    assert list(outside.iterdir()) == []
    (volume / "a").mkdir()
    (volume / "a" / "b").symlink_to(outside)
    with pytest.raises(LinkRefused):
        resolve_beneath(volume, "a/b", "subPath", create=True)


def test_missing_directories_are_made_with_the_owner_and_mode(tmp_path: Path) -> None:
    owner = RunAs(os.getuid(), os.getgid())
    made = resolve_beneath(tmp_path, "x/y", "subPath", create=True, mode=0o750, owner=owner)
    assert made == tmp_path / "x" / "y"
    assert made.is_dir() and (made.stat().st_mode & 0o777) == 0o750
    (made / "file").write_text("f")
    assert resolve_beneath(tmp_path, "x/y/file", "subPath") == made / "file"
    with pytest.raises(FileNotFoundError, match="does not exist"):
        resolve_beneath(tmp_path, "missing", "subPath")


def test_place_link_replaces_the_entry_itself_and_keeps_a_directory(tmp_path: Path) -> None:
    """A link or file at the path is the pod's own entry: unlinked, never followed; a
    directory is left as it is (False), or removed only when asked and empty."""
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "kept").write_text("host")
    base = tmp_path / "base"
    base.mkdir()
    (base / "at").symlink_to(outside / "kept")
    assert place_link(base, "at", "target", "test")
    assert os.readlink(base / "at") == "target"
    assert (outside / "kept").read_text() == "host"
    (base / "dir").mkdir()
    (base / "dir" / "inside").write_text("x")
    assert not place_link(base, "dir", "target", "test")
    with pytest.raises(FileNotFoundError, match="not empty"):
        place_link(base, "dir", "target", "test", replace_empty_dir=True)
    (base / "file").write_text("f")
    with pytest.raises(LinkRefused, match="'file' in 'file/x' is not a directory"):
        place_link(base, "file/x", "target", "test")


def test_chown_file_gives_the_file_and_never_what_a_link_at_its_name_points_to(
    tmp_path: Path,
) -> None:
    """The oci runtime's termination message file: a link at its name (to a root-owned
    host file) is left alone, the host file keeps its owner."""
    if os.geteuid() != 0:
        pytest.fail("needs root: chown to another user")
    own = tmp_path / "own"
    own.mkdir()
    (own / "termination-log").write_text("")
    assert chown_file(own, "termination-log", 300123, 300124)
    info = os.stat(own / "termination-log")
    assert (info.st_uid, info.st_gid) == (300123, 300124)

    host_file = tmp_path / "host-file"
    host_file.write_text("root's")
    planted = tmp_path / "planted"
    planted.mkdir()
    (planted / "termination-log").symlink_to(host_file)
    assert not chown_file(planted, "termination-log", 300123, 300124)
    assert os.stat(host_file).st_uid == 0
    assert not chown_file(planted, "missing", 300123, 300124)
