"""Image events worded as the kubelet words them."""

from __future__ import annotations

from vkpy.oci.images import messages
from vkpy.oci.images.errors import ImageNeverPullError
from vkpy.oci.images.pull import PullResult
from vkpy.oci.images.reference import parse
from vkpy.oci.images.store import StoredImage

IMAGE = StoredImage("sha256:" + "a" * 64, ("docker.io/library/busybox:1.36",), (), 4_321, 0.0)


def result(pulled: bool, asked: bool, seconds: float, waiting: float) -> PullResult:
    ref = parse("busybox:1.36")
    return PullResult(ref, IMAGE, pulled, asked, IMAGE.size, seconds, waiting)


def test_pulled_with_time_and_size() -> None:
    assert messages.pulled("busybox:1.36", result(True, True, 1.2345, 3.5)) == (
        'Successfully pulled image "busybox:1.36" in 1.234s (3.5s including waiting). '
        "Image size: 4321 bytes."
    )
    assert messages.pulled("busybox:1.36", result(False, True, 0.0204, 0.0204)) == (
        'Successfully pulled image "busybox:1.36" in 20ms (20ms including waiting). '
        "Image size: 4321 bytes."
    )
    assert "in 2m5s (" in messages.pulled("x", result(True, True, 125.0, 125.0))
    assert "in 1h0m0.5s (" in messages.pulled("x", result(True, True, 3600.5009, 3600.5))


def test_already_present_when_no_registry_was_asked() -> None:
    assert (
        messages.pulled("busybox:1.36", result(False, False, 0.001, 0.001))
        == 'Container image "busybox:1.36" already present on machine'
    )


def test_failure_and_back_off() -> None:
    error = ImageNeverPullError('Container image "x" is not present with pull policy of Never')
    assert messages.failed("x", error) == (
        'Failed to pull image "x": Container image "x" is not present with pull policy of Never'
    )
    assert error.reason == "ErrImageNeverPull"
    assert messages.back_off("x") == 'Back-off pulling image "x"'
    assert messages.pulling("x") == 'Pulling image "x"'
