"""Typed errors a backend raises, so the kubelet logic decides by type, never by text.

The pod controller retries `RetryableError` with backoff, reports `InvalidInputError`
and `UnsupportedError` on the pod (reason, message, Event) without retrying, and treats
`NotFoundError` as "the backend has no such pod".
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
    """The pod cannot be run by this backend as written; retrying will not help."""

    reason = "ProviderFailed"


class UnsupportedError(ProviderError):
    """The backend does not implement this operation or pod feature."""

    reason = "Unsupported"


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
