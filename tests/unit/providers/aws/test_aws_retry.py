"""Retries of AWS calls: what is transient, the jittered back-off, and the errors left."""

from __future__ import annotations

import random

import pytest
from botocore.exceptions import ClientError, EndpointConnectionError

from tests.unit.fake_clock import NoWaitClock
from vkpy.providers.aws.retry import AwsApiError, RetryPolicy, transient_reason, with_retries
from vkpy.providers.errors import RetryableError


def client_error(code: str, status: int = 400) -> ClientError:
    return ClientError(
        {"Error": {"Code": code, "Message": "m"}, "ResponseMetadata": {"HTTPStatusCode": status}},
        "Op",
    )


@pytest.mark.parametrize(
    ("error", "reason"),
    [
        (client_error("ThrottlingException"), "Throttled"),
        (client_error("TooManyRequestsException", 429), "Throttled"),
        (client_error("Anything", 429), "Throttled"),
        (client_error("ServiceException", 500), "BackendUnavailable"),
        (client_error("Weird", 503), "BackendUnavailable"),
        (EndpointConnectionError(endpoint_url="http://x"), "BackendUnavailable"),
        (TimeoutError(), "BackendUnavailable"),
        (client_error("ResourceNotFoundException", 404), None),
        (client_error("InvalidParameterValueException"), None),
        (ValueError("bug"), None),
    ],
)
def test_transient_reasons(error: BaseException, reason: str | None) -> None:
    assert transient_reason(error) == reason


def test_full_jitter_stays_under_the_growing_ceiling() -> None:
    policy = RetryPolicy(attempts=10, base_delay=0.1, max_delay=1.0)
    rng = random.Random(1)
    for retry, ceiling in enumerate([0.1, 0.2, 0.4, 0.8, 1.0, 1.0]):
        delays = [policy.delay(retry, rng) for _ in range(200)]
        assert all(0 <= d <= ceiling for d in delays)
        assert max(delays) > ceiling * 0.8  # jitter spreads over the whole range


class Flaky:
    def __init__(self, *errors: BaseException) -> None:
        self.errors = list(errors)
        self.calls = 0

    async def __call__(self) -> str:
        self.calls += 1
        if self.errors:
            raise self.errors.pop(0)
        return "ok"


NO_WAIT = NoWaitClock()


async def test_throttling_is_retried_until_it_passes() -> None:
    call = Flaky(client_error("ThrottlingException"), client_error("X", 500))
    assert await with_retries(call, "svc:op", RetryPolicy(attempts=3), clock=NO_WAIT) == "ok"
    assert call.calls == 3


async def test_exhausted_retries_become_retryable_errors() -> None:
    call = Flaky(*[client_error("ThrottlingException")] * 5)
    with pytest.raises(RetryableError) as caught:
        await with_retries(call, "svc:op", RetryPolicy(attempts=3), clock=NO_WAIT)
    assert caught.value.reason == "Throttled"
    assert call.calls == 3


async def test_other_answers_are_not_retried_and_keep_their_code() -> None:
    call = Flaky(client_error("ResourceNotFoundException", 404))
    with pytest.raises(AwsApiError) as caught:
        await with_retries(call, "lambda:get_function", RetryPolicy(), clock=NO_WAIT)
    assert caught.value.code == "ResourceNotFoundException"
    assert caught.value.not_found
    assert call.calls == 1


async def test_calls_that_must_not_repeat_retry_only_refusals() -> None:
    refused = Flaky(client_error("TooManyRequestsException", 429))
    policy = RetryPolicy(attempts=3)
    assert await with_retries(refused, "op", policy, clock=NO_WAIT, only_throttling=True) == "ok"
    failed = Flaky(client_error("ServiceException", 500))
    with pytest.raises(RetryableError):
        await with_retries(failed, "op", policy, clock=NO_WAIT, only_throttling=True)
    assert failed.calls == 1
