"""The ways getting an image fails, typed so the backend can report each as the
kubelet does: `InvalidImageName`, `ErrImagePull` (then `ImagePullBackOff`) and
`ErrImageNeverPull`. Messages never hold credentials."""

from __future__ import annotations


class ImageError(Exception):
    """Anything that goes wrong with an image; `reason` is the kubelet's word for it."""

    reason = "ErrImagePull"


class InvalidImageName(ImageError):
    """The reference is not one the kubelet would accept."""

    reason = "InvalidImageName"


class ImagePullError(ImageError):
    """The registry (or a mirror) did not give the image: unreachable, unknown,
    refused credentials, or content that does not match its digest."""

    reason = "ErrImagePull"


class ImageNeverPullError(ImageError):
    """`imagePullPolicy: Never` and the image is not in the node's store."""

    reason = "ErrImageNeverPull"


class ImageNotFound(ImageError):
    """A store operation (unpack, config, remove) named an image the store lacks."""

    reason = "ErrImageNeverPull"


class ImageToolError(ImageError):
    """skopeo or umoci failed for a reason that is not the registry's: the store, the
    disk, a bad archive."""

    reason = "ErrImagePull"
