"""Typed errors a backend raises, so the kubelet logic decides by type, never by text.

The pod controller follows the kubelet's rule: only what the kubelet rejects at
admission fails a pod. `AdmissionError` (resources the backend can never fit, a
sysctl it forbids) is that rejection: Failed, with reason, message and Event.
Anything else that stops a container from starting leaves the pod Pending with the
container Waiting, and its create is tried again with back-off: `CannotStartError`
names the kubelet's waiting reason (CreateContainerConfigError, ErrImagePull, ...);
`InvalidInputError` and `UnsupportedError` raised by a create are the runtime
refusing a container (CreateContainerError). `RetryableError` is retried with the
queue's back-off and shown nowhere; `NotFoundError` is "the backend has no such pod".
"""

from __future__ import annotations


class ProviderError(Exception):
    """Base of every error a backend raises on purpose.

    `reason` is a short CamelCase word for the pod status and Events; the message
    (str(error)) is shown to users as is, so it must never contain secret values.
    """

    reason = "ProviderFailed"

    def __init__(self, message: str, *, reason: str | None = None) -> None:
        super().__init__(message)
        if reason is not None:
            self.reason = reason


class NotFoundError(ProviderError):
    """The backend has no such pod, container or resource."""

    reason = "NotFound"


class InvalidInputError(ProviderError):
    """The pod cannot be run by this backend as written. At create it leaves the
    container Waiting with CreateContainerError (tried again with back-off, as the
    kubelet does with a runtime that refuses a container); elsewhere (exec, an
    update) the operation is refused."""

    reason = "ProviderFailed"


class UnsupportedError(ProviderError):
    """The backend does not implement this operation or pod feature (at create: the
    container Waiting with CreateContainerError, as InvalidInputError)."""

    reason = "Unsupported"


class CannotStartError(ProviderError):
    """A container of the pod cannot start now: the pod stays Pending, the container
    Waiting with `reason`, the kubelet's waiting reason (`CreateContainerConfigError`,
    `CreateContainerError`, `RunContainerError`, `ErrImagePull`, `ErrImageNeverPull`,
    `InvalidImageName`), and the create is tried again with back-off (10 s doubling
    to 5 min for `ErrImagePull`, shown as `ImagePullBackOff` in between). Never
    Failed: a Deployment whose pods cannot start keeps its replicas, all Pending.
    `containers` names the containers that cannot start (empty: every one)."""

    reason = "CreateContainerError"

    def __init__(
        self, message: str, *, reason: str | None = None, containers: tuple[str, ...] = ()
    ) -> None:
        super().__init__(message, reason=reason)
        self.containers = containers


class AdmissionError(ProviderError):
    """The backend rejects the pod as the kubelet's admission would: resources it can
    never fit, a sysctl it forbids. The pod is Failed (`reason`, the message as
    `Pod was rejected: ...`, a Warning Event) and nothing of it runs."""

    reason = "UnexpectedAdmissionError"


class RetryableError(ProviderError):
    """A transient failure (throttling, timeouts, the backend unavailable): try again.

    `retry_after` is the backend's hint in seconds, when it gave one.
    """

    reason = "BackendUnavailable"

    def __init__(
        self, message: str, *, reason: str | None = None, retry_after: float | None = None
    ) -> None:
        super().__init__(message, reason=reason)
        self.retry_after = retry_after
