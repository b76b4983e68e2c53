"""host_paths.open_made: a missing subPath of a hostPath is made with the mode of the
hostPath's own directory (not the admin's prefix above it), as the kubelet makes it,
and a link the pod planted on the way is refused, its target untouched."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from vkpy.providers.process import beneath, host_paths


def test_a_missing_sub_path_takes_the_mode_of_the_host_paths_directory(tmp_path: Path) -> None:
    prefix = tmp_path / "prefix"
    volume = prefix / "volume"
    volume.mkdir(parents=True)
    os.chmod(prefix, 0o755)
    os.chmod(volume, 0o750)
    fd = host_paths.open_made(str(prefix), "volume/sub/path")
    try:
        assert os.readlink(f"/proc/self/fd/{fd}") == str(volume / "sub" / "path")
    finally:
        os.close(fd)
    for made in (volume / "sub", volume / "sub" / "path"):
        assert stat.S_IMODE(made.stat().st_mode) == 0o750


def test_a_link_planted_on_the_way_is_refused(tmp_path: Path) -> None:
    prefix = tmp_path / "prefix"
    (prefix / "volume").mkdir(parents=True)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (prefix / "volume" / "sub").symlink_to(elsewhere)
    with pytest.raises(beneath.LinkRefused):
        host_paths.open_made(str(prefix), "volume/sub/path")
    assert list(elsewhere.iterdir()) == []
