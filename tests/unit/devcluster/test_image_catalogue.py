"""What `up` does when an image cannot be built here (vkpy/devcluster/images): an
image whose prerequisite is missing (root for mmdebstrap, Go for agnhost) is left
out with a warning saying how to build it, the others are still served; a build
that fails for any other reason stops `up` with its message."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from tests.registry import busybox_layout
from vkpy.devcluster.images import ImageBuildError, build, catalogue
from vkpy.devcluster.images.build import ImageUnavailable


def unavailable() -> Path:
    raise ImageUnavailable("the nginx image is built with mmdebstrap as root")


def broken() -> Path:
    raise ImageBuildError("umoci repack: no space left on device")


def test_an_image_that_cannot_be_built_here_is_left_out_with_a_warning(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    images = (
        catalogue.Image("busybox", busybox_layout, ("docker.io/library/busybox:latest",)),
        catalogue.Image("nginx", unavailable, ("docker.io/library/nginx:alpine",)),
    )
    monkeypatch.setattr(catalogue, "all_images", lambda: images)
    with caplog.at_level(logging.WARNING, logger="vkpy.devcluster.images"):
        built = build()
    assert [b.image.name for b in built] == ["busybox"]
    assert built[0].digest.startswith("sha256:")
    assert "not serving image nginx: the nginx image is built with mmdebstrap as root" in (
        caplog.text
    )
    assert "make images" in caplog.text


def test_a_failing_build_stops_with_its_message(monkeypatch: pytest.MonkeyPatch) -> None:
    images = (catalogue.Image("nginx", broken, ("docker.io/library/nginx:alpine",)),)
    monkeypatch.setattr(catalogue, "all_images", lambda: images)
    with pytest.raises(ImageBuildError, match="no space left on device"):
        build()


def test_unknown_image_names_are_refused() -> None:
    with pytest.raises(ValueError, match="unknown images \\['nginix'\\]"):
        build(["nginix"])
