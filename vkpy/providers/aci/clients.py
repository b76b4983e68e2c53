"""The Azure SDK clients of one node, and ARM's errors as the provider contract's.

The official async SDK does the talking: azure-identity's async credential classes
sign in (client secret, workload identity's federated token, managed identity, or
the default chain), azure-mgmt-containerinstance manages groups and
azure-mgmt-monitor reads their metrics. The SDK's retry policy retries 429 and 5xx
answers itself, honouring Retry-After; what is still failing after that becomes a
`RetryableError` with the service's hint, so the pod controller backs off instead of
giving up. Errors the service will keep giving (a group ACI refuses) become
`InvalidInputError` with ARM's code as the reason and its message for the user.
"""

from __future__ import annotations

from typing import Any

from azure.core.credentials_async import AsyncTokenCredential
from azure.core.exceptions import (
    ClientAuthenticationError,
    HttpResponseError,
    ServiceRequestError,
    ServiceResponseError,
)
from azure.identity import aio as identity
from azure.mgmt.containerinstance.aio import ContainerInstanceManagementClient
from azure.mgmt.monitor.aio import MonitorManagementClient

from vkpy.providers.aci.config import AciConfig
from vkpy.providers.errors import (
    AdmissionError,
    InvalidInputError,
    NotFoundError,
    ProviderError,
    RetryableError,
)

ADMISSION_CODES = frozenset({"ResourceRequestsNotSupported"})
"""ARM's refusals of a group that the kubelet makes at admission (requests no
container group can have, as a kubelet's OutOfcpu/OutOfmemory): the pod is Failed.
Any other refusal leaves it Pending, its containers CreateContainerError."""
RETRYABLE_CODES = frozenset(
    {
        "TooManyRequests",
        "ServiceUnavailable",
        "ContainerGroupQuotaReached",
        "RegistryErrorResponse",
        "ContainerGroupTransitioning",
        "Conflict",
        "InternalServerError",
        "ResourceGroupNotFound",
        "AuthorizationFailed",
        "AuthenticationFailed",
        "InvalidAuthenticationToken",
    }
)
"""ARM codes that may go away by themselves (quota freed, registry back, a role
assigned): retried with back-off, the platform's message on the pod meanwhile."""


def credential(config: AciConfig) -> AsyncTokenCredential:
    """The azure-identity async credential the config asks for."""
    c = config.credentials
    common: dict[str, Any] = {}
    if c.authority:
        common["authority"] = c.authority
    if config.ca_bundle:
        common["connection_verify"] = config.ca_bundle
    if c.kind == "client_secret":
        assert c.tenant_id and c.client_id and c.client_secret
        return identity.ClientSecretCredential(c.tenant_id, c.client_id, c.client_secret, **common)
    if c.kind == "workload_identity":
        assert c.tenant_id and c.client_id and c.token_file
        return identity.WorkloadIdentityCredential(
            tenant_id=c.tenant_id, client_id=c.client_id, token_file_path=c.token_file, **common
        )
    if c.kind == "managed_identity":
        common.pop("authority", None)
        return identity.ManagedIdentityCredential(client_id=c.client_id, **common)
    return identity.DefaultAzureCredential(**common)


class AzureClients:
    """One credential and the two management clients built on it."""

    def __init__(self, config: AciConfig) -> None:
        self.config = config
        self.credential = credential(config)
        options: dict[str, Any] = {
            "base_url": config.arm_endpoint,
            "credential_scopes": [f"{config.arm_audience}/.default"],
            "retry_total": config.retry_attempts,
            "retry_status": config.retry_attempts,  # 429/5xx answers (the SDK's default: 3)
            "retry_backoff_factor": config.retry_backoff,
            "retry_backoff_max": 30,
        }
        if config.ca_bundle:
            options["connection_verify"] = config.ca_bundle
        self.aci = ContainerInstanceManagementClient(
            self.credential, config.subscription_id, **options
        )
        self.monitor = MonitorManagementClient(self.credential, config.subscription_id, **options)

    async def close(self) -> None:
        await self.aci.close()
        await self.monitor.close()
        await self.credential.close()


def retry_after(error: HttpResponseError) -> float | None:
    response = error.response
    if response is None:
        return None
    headers = getattr(response, "headers", None) or {}
    for header, scale in (("retry-after-ms", 0.001), ("Retry-After", 1.0)):
        value = headers.get(header)
        if value:
            try:
                return float(value) * scale
            except ValueError:
                continue
    return None


def arm_code(error: HttpResponseError) -> str:
    detail = getattr(error, "error", None)
    code = getattr(detail, "code", None)
    return str(code or error.reason or "")


def arm_message(error: HttpResponseError) -> str:
    detail = getattr(error, "error", None)
    message = getattr(detail, "message", None)
    return str(message or error.message or error)


def provider_error(error: Exception, what: str) -> ProviderError:
    """An SDK error as the provider contract's (see the module docstring)."""
    if isinstance(error, ProviderError):
        return error
    if isinstance(error, ClientAuthenticationError) and getattr(error, "status_code", 401) in (
        None,
        401,
    ):
        return RetryableError(f"{what}: cannot sign in to Azure: {error}", reason="AzureAuth")
    if isinstance(error, HttpResponseError):
        code = arm_code(error)
        status = error.status_code or 0
        message = f"{what}: {code}: {arm_message(error)}"
        if status == 404 and code not in ("ResourceGroupNotFound", "SubscriptionNotFound"):
            return NotFoundError(message, reason=code or "NotFound")
        if status == 429 or status >= 500 or code in RETRYABLE_CODES or status in (401, 403):
            return RetryableError(
                message, reason=code or "AzureUnavailable", retry_after=retry_after(error)
            )
        if 400 <= status < 500 and code in ADMISSION_CODES:
            return AdmissionError(arm_message(error), reason=code)
        if 400 <= status < 500:
            return InvalidInputError(arm_message(error), reason=code or "InvalidRequest")
        return RetryableError(message, reason=code or "AzureError")
    if isinstance(error, OSError | TimeoutError | ServiceRequestError | ServiceResponseError):
        return RetryableError(f"{what}: {error}", reason="AzureUnreachable")
    raise error
