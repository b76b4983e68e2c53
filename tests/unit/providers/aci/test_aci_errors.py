"""How ARM's refusals of a container group reach the pod controller: requests no group
can have are an admission rejection (Failed, as the kubelet's OutOfcpu); any other
refusal is a runtime refusing a container (Pending, CreateContainerError); issue 31."""

from __future__ import annotations

from types import SimpleNamespace

from azure.core.exceptions import HttpResponseError

from vkpy.providers.aci.clients import provider_error
from vkpy.providers.errors import AdmissionError, InvalidInputError, RetryableError


def refusal(status: int, code: str, message: str) -> HttpResponseError:
    error = HttpResponseError(message=message)
    error.status_code = status
    error.error = SimpleNamespace(code=code, message=message)  # type: ignore[assignment]
    return error


def test_requests_no_group_can_have_are_an_admission_rejection() -> None:
    words = "The requested resource with 'cpu: 8' exceeds the maximum allowed resource"
    mapped = provider_error(refusal(400, "ResourceRequestsNotSupported", words), "creating")
    assert isinstance(mapped, AdmissionError)
    assert mapped.reason == "ResourceRequestsNotSupported"
    assert str(mapped) == words


def test_other_refusals_stay_invalid_input_and_capacity_is_retried() -> None:
    mapped = provider_error(refusal(400, "InvalidImageName", "bad name"), "creating")
    assert type(mapped) is InvalidInputError and mapped.reason == "InvalidImageName"
    busy = provider_error(refusal(409, "ContainerGroupQuotaReached", "quota"), "creating")
    assert isinstance(busy, RetryableError)
