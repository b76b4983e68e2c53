"""Retrying AWS calls that failed for a passing reason, with backoff and full jitter.

AWS answers a busy caller with throttling errors and, now and then, with 5xx
answers or dropped connections; the right response is to wait a random, growing
while and try again (AWS's "exponential backoff and jitter"). botocore's own
retries are switched off for vkpy's clients so that this module is the one place
that decides, and tests can drive it with an injected clock and random source.
When the attempts run out, the failure becomes `RetryableError`, which the pod
controller retries again later with its own backoff: a pod is never stuck because
AWS was busy. Every other error answer becomes `AwsApiError`, which carries AWS's
error code for callers that handle particular answers (a function that already
exists, a task that is gone).
"""

from __future__ import annotations

import asyncio
import logging
import random
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TypeVar

import aiohttp
from botocore.exceptions import (
    BotoCoreError,
    ClientError,
    ConnectionClosedError,
    ConnectTimeoutError,
    EndpointConnectionError,
    ReadTimeoutError,
)

from vkpy.core.clock import SYSTEM_CLOCK, Clock
from vkpy.providers.errors import (
    InvalidInputError,
    NotFoundError,
    ProviderError,
    RetryableError,
)

log = logging.getLogger(__name__)

T = TypeVar("T")

THROTTLING_CODES = frozenset(
    {
        "Throttling",
        "ThrottlingException",
        "ThrottledException",
        "TooManyRequestsException",
        "RequestLimitExceeded",
        "RequestThrottled",
        "RequestThrottledException",
        "EC2ThrottledException",
        "ProvisionedThroughputExceededException",
        "BandwidthLimitExceeded",
        "SlowDown",
        "PriorRequestNotComplete",
    }
)
"""Error codes AWS uses for "slow down" across services."""

TRANSIENT_CODES = frozenset(
    {
        "RequestTimeout",
        "RequestTimeoutException",
        "InternalError",
        "InternalFailure",
        "InternalServerError",
        "ServiceUnavailable",
        "ServiceUnavailableException",
        "ServiceException",
        "ServerException",
        "EC2ThrottledException",
    }
)
"""Error codes for failures on AWS's side that a later attempt may not meet."""

NOT_FOUND_CODES = frozenset(
    {
        "ResourceNotFoundException",
        "ResourceNotFound",
        "NotFoundException",
        "NoSuchEntity",
        "NoSuchKey",
        "NoSuchBucket",
    }
)
INVALID_INPUT_CODES = frozenset(
    {
        "InvalidParameterValueException",
        "InvalidParameterException",
        "InvalidParameterCombination",
        "ValidationException",
        "InvalidRequestContentException",
        "RequestTooLargeException",
        "CodeStorageExceededException",
        "InvalidZipFileException",
        "ClientException",
    }
)


@dataclass(frozen=True)
class RetryPolicy:
    """How hard to try one AWS call before giving the failure to the caller."""

    attempts: int = 6
    """Tries in all (the first and the retries)."""
    base_delay: float = 0.2
    """Upper bound of the first wait, in seconds; doubles with every retry."""
    max_delay: float = 5.0
    """Upper bound of any single wait, in seconds."""

    def delay(self, retry: int, rng: random.Random) -> float:
        """The wait before retry number `retry` (0-based): full jitter."""
        ceiling = min(self.max_delay, self.base_delay * (2**retry))
        return rng.uniform(0, ceiling)


class AwsApiError(ProviderError):
    """AWS answered with an error that retrying will not change."""

    reason = "AwsError"

    def __init__(self, message: str, *, code: str, status: int, operation: str) -> None:
        super().__init__(message)
        self.code = code
        """AWS's error code (`ResourceNotFoundException`, ...)."""
        self.status = status
        self.operation = operation

    @property
    def not_found(self) -> bool:
        return self.code in NOT_FOUND_CODES

    @property
    def invalid_input(self) -> bool:
        return self.code in INVALID_INPUT_CODES


def error_code(error: ClientError) -> tuple[str, int]:
    """AWS's error code and HTTP status of a ClientError."""
    response = error.response or {}
    code = str((response.get("Error") or {}).get("Code") or "")
    status = int((response.get("ResponseMetadata") or {}).get("HTTPStatusCode") or 0)
    return code, status


def _message(error: ClientError) -> str:
    return str(((error.response or {}).get("Error") or {}).get("Message") or "")


def transient_reason(error: BaseException) -> str | None:
    """ "Throttled" or "BackendUnavailable" when a later attempt may succeed, else None."""
    if isinstance(error, ClientError):
        code, status = error_code(error)
        if code in THROTTLING_CODES or status == 429:
            return "Throttled"
        if code in TRANSIENT_CODES or status >= 500:
            return "BackendUnavailable"
        return None
    if isinstance(
        error,
        EndpointConnectionError
        | ConnectionClosedError
        | ConnectTimeoutError
        | ReadTimeoutError
        | aiohttp.ClientConnectionError
        | aiohttp.ClientPayloadError
        | asyncio.TimeoutError
        | ConnectionError,
    ):
        return "BackendUnavailable"
    return None


def convert(error: BaseException, operation: str) -> ProviderError:
    """The provider error for a failure that will not be retried here."""
    reason = transient_reason(error)
    if reason is not None:
        return RetryableError(f"AWS {operation}: {_describe(error)}", reason=reason)
    if isinstance(error, ClientError):
        code, status = error_code(error)
        return AwsApiError(
            f"AWS {operation}: {code}: {_message(error)}",
            code=code,
            status=status,
            operation=operation,
        )
    if isinstance(error, BotoCoreError):
        # Parameter validation and the like: the request as built cannot be sent.
        return InvalidInputError(f"AWS {operation}: {error}", reason="InvalidAwsRequest")
    return ProviderError(f"AWS {operation}: {_describe(error)}")


def _describe(error: BaseException) -> str:
    if isinstance(error, ClientError):
        code, status = error_code(error)
        return f"{code or status}: {_message(error)}"
    return f"{type(error).__name__}: {error}" if str(error) else type(error).__name__


async def with_retries(
    call: Callable[[], Awaitable[T]],
    operation: str,
    policy: RetryPolicy,
    *,
    clock: Clock = SYSTEM_CLOCK,
    rng: random.Random | None = None,
    only_throttling: bool = False,
) -> T:
    """`await call()`, retrying transient failures per `policy`; errors are ProviderErrors.

    With `only_throttling`, only answers that say the call was refused before it did
    anything are retried (for calls that must not run twice, such as Invoke)."""
    rng = rng or random.Random()
    retry = 0
    while True:
        try:
            return await call()
        except asyncio.CancelledError:
            raise
        except Exception as error:
            reason = transient_reason(error)
            if only_throttling and reason != "Throttled":
                reason = None
            if reason is None or retry + 1 >= policy.attempts:
                raise convert(error, operation) from error
            delay = policy.delay(retry, rng)
            log.debug(
                "AWS call failed, retrying",
                extra={
                    "operation": operation,
                    "reason": reason,
                    "error": _describe(error),
                    "retry_in": round(delay, 3),
                },
            )
            retry += 1
            await clock.sleep(delay)


def not_found(error: ProviderError) -> bool:
    """Whether `error` says the resource does not exist."""
    return isinstance(error, NotFoundError) or (isinstance(error, AwsApiError) and error.not_found)
