"""Where the busybox image's binary comes from (vkpy/devcluster/images/busybox.py):
upstream's release tarball, refused unless its sha256 is the pinned one; when the
source or a compiler cannot be had, Debian's /bin/busybox with one warning saying
what differs and what to install, and the image is still built."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from vkpy.devcluster.images import busybox
from vkpy.devcluster.images.build import ImageBuildError


@pytest.fixture
def cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("VKPY_IMAGE_CACHE", str(tmp_path / "cache"))
    return tmp_path / "cache"


def test_a_tarball_with_another_sha256_is_refused(
    cache: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    wrong = tmp_path / busybox.TARBALL
    wrong.write_bytes(b"not busybox")
    monkeypatch.setenv(busybox.SOURCE_ENV, str(wrong))
    monkeypatch.setattr(busybox, "_missing_tools", list)  # as on a machine with gcc
    with pytest.raises(ImageBuildError, match="refused"):
        busybox.binary()
    # Nothing of it kept: no binary, no tarball, no build directory.
    assert [p.name for p in cache.iterdir() if not p.name.endswith(".lock")] == []


def test_without_the_source_the_image_is_debians_busybox_with_one_warning(
    cache: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    if not busybox.BUSYBOX.exists():
        pytest.skip("no /bin/busybox (busybox-static) to fall back to")
    monkeypatch.setenv(busybox.SOURCE_ENV, str(tmp_path / "nowhere" / busybox.TARBALL))
    monkeypatch.setattr(busybox, "_missing_tools", list)
    with caplog.at_level(logging.WARNING, logger="vkpy.devcluster.images"):
        assert busybox.binary() == busybox.Binary(busybox.BUSYBOX, upstream=False)
        layout = busybox.busybox()
        busybox.busybox("other")
    assert (layout / "index.json").exists()  # the image is still made
    [warning] = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert "nowhere" in warning  # why
    assert "names are not shell identifiers" in warning  # what differs
    assert "make system-deps" in warning and busybox.SOURCE_ENV in warning  # what to do


def test_without_a_compiler_it_is_debians_busybox(
    cache: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    if not busybox.BUSYBOX.exists():
        pytest.skip("no /bin/busybox (busybox-static) to fall back to")
    real_which = busybox.shutil.which
    monkeypatch.setattr(
        busybox.shutil, "which", lambda name: None if name == "gcc" else real_which(name)
    )
    with caplog.at_level(logging.WARNING, logger="vkpy.devcluster.images"):
        assert not busybox.binary().upstream
    assert "cannot be built here (no gcc)" in caplog.text
