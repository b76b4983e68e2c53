"""The kubelet's words for image events and waiting states, so that `kubectl describe
pod` reads the same on a vkpy node as on any other.

Event reasons: `Pulling`, `Pulled`, `Failed`, `BackOff`, `ErrImageNeverPull`,
`InspectFailed` (an invalid name); container waiting reasons: `ErrImagePull`,
`ImagePullBackOff`, `ErrImageNeverPull`, `InvalidImageName`.
"""

from __future__ import annotations

from vkpy.oci.images.errors import ImageError
from vkpy.oci.images.pull import PullResult

PULLING = "Pulling"
PULLED = "Pulled"
FAILED = "Failed"
BACK_OFF = "BackOff"
IMAGE_PULL_BACK_OFF = "ImagePullBackOff"


def pulling(image: str) -> str:
    return f'Pulling image "{image}"'


def pulled(image: str, result: PullResult) -> str:
    """The `Pulled` event: a pull with its time and size, or an image already there."""
    if not result.asked_registry:
        return f'Container image "{image}" already present on machine'
    return (
        f'Successfully pulled image "{image}" in {_duration(result.seconds)} '
        f"({_duration(result.with_waiting)} including waiting). "
        f"Image size: {result.size} bytes."
    )


def failed(image: str, error: ImageError) -> str:
    """The `Failed` event's message; `error.reason` is the container's waiting reason."""
    return f'Failed to pull image "{image}": {error}'


def back_off(image: str) -> str:
    """The `BackOff` event while the container waits with `ImagePullBackOff`."""
    return f'Back-off pulling image "{image}"'


def _duration(seconds: float) -> str:
    """Go's time.Duration text truncated to milliseconds, as the kubelet prints it."""
    ms = int(seconds * 1000)
    if ms < 1000:
        return f"{ms}ms"
    hours, rest = divmod(ms, 3_600_000)
    minutes, rest = divmod(rest, 60_000)
    secs = f"{rest // 1000}.{rest % 1000:03d}".rstrip("0").rstrip(".")
    return (f"{hours}h" if hours else "") + (f"{minutes}m" if hours or minutes else "") + secs + "s"
