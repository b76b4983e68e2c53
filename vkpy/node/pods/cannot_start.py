"""What the kubelet shows for a pod whose containers cannot start, and when it tries again.

The kubelet fails a pod only at admission. A container that cannot start (its image
cannot be pulled, a ConfigMap key is missing, the runtime refuses it) leaves the pod
Pending with the container Waiting for a reason, and the pod is tried again: after
a failed pull not before the image back-off (10 s doubling to 5 min, the container
shown as `ImagePullBackOff` meanwhile), otherwise with the pod's sync back-off.
Without this, a ReplicaSet replaces each Failed pod at once and thousands of Failed
pods pile up in minutes. Pure functions, so the rules are tested without a pod.
"""

from __future__ import annotations

from vkpy.core.objects import KubeObject, containers_of
from vkpy.providers.base import ContainerState, PodState
from vkpy.providers.errors import CannotStartError, InvalidInputError, UnsupportedError

CREATE_CONTAINER_ERROR = "CreateContainerError"
CONFIG_ERROR = "CreateContainerConfigError"
ERR_IMAGE_PULL = "ErrImagePull"
IMAGE_PULL_BACK_OFF = "ImagePullBackOff"
PULL_BACKOFF_INITIAL = 10.0
PULL_BACKOFF_MAX = 300.0


def as_cannot_start(error: InvalidInputError | UnsupportedError) -> CannotStartError:
    """A backend's refusal of a pod at create, as the kubelet reports a runtime that
    refuses a container: CreateContainerError, with the backend's own reason word in
    front of its message so that it is not lost."""
    return CannotStartError(f"{error.reason}: {error}", reason=CREATE_CONTAINER_ERROR)


def affected(pod: KubeObject, error: CannotStartError) -> tuple[str, ...]:
    """The names of the containers that cannot start (every one, when not said)."""
    names = tuple(str(c.get("name")) for c in containers_of(pod))
    if not error.containers:
        return names
    return tuple(n for n in names if n in error.containers) or names


def waiting(reason: str, messages: dict[str, str]) -> PodState:
    """Pending, each container named in `messages` Waiting with `reason` and its message
    (the others keep the kubelet's default, ContainerCreating)."""
    containers = tuple(
        ContainerState(name=name, state="waiting", reason=reason, message=message)
        for name, message in messages.items()
    )
    return PodState(phase="Pending", containers=containers)


def pull_delay(failures: int) -> float:
    """The image pull back-off after `failures` failed pulls in a row: 10, 20, 40, ...
    300 s (the kubelet's)."""
    return min(PULL_BACKOFF_MAX, PULL_BACKOFF_INITIAL * 2.0 ** min(failures - 1, 16))


def back_off_message(image: str) -> str:
    """The message of the `BackOff` Event and of ImagePullBackOff (the kubelet's words)."""
    return f'Back-off pulling image "{image}"'


def images_of(pod: KubeObject, names: tuple[str, ...]) -> dict[str, str]:
    """Container name to image, for the containers named."""
    return {
        str(c.get("name")): str(c.get("image") or "")
        for c in containers_of(pod)
        if str(c.get("name")) in names
    }
