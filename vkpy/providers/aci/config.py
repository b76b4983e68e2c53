"""Settings of the `aci` backend (its `--provider-config`), read strictly.

One node is one subscription, resource group and region; its pods become container
groups there. Credentials say which azure-identity class signs in (a client secret,
a workload identity's federated token, a managed identity, or the default chain).
Unknown keys are refused, so a typo never silently changes nothing.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Literal

from vkpy.providers.config_reader import ConfigReader

CredentialKind = Literal["default", "client_secret", "workload_identity", "managed_identity"]
DEFAULT_CAPACITY: Mapping[str, str] = {
    "cpu": "800",
    "memory": "4Ti",
    "pods": "200",
    "ephemeral-storage": "10Ti",
}


@dataclass(frozen=True)
class Credentials:
    """How vkpy signs in to Azure (azure-identity's async credential classes)."""

    kind: CredentialKind = "default"
    tenant_id: str | None = None
    client_id: str | None = None
    client_secret: str | None = field(default=None, repr=False)
    """For `client_secret`; else read from AZURE_CLIENT_SECRET."""
    token_file: str | None = None
    """For `workload_identity`: the federated token file (AZURE_FEDERATED_TOKEN_FILE)."""
    authority: str | None = None
    """Entra ID's host (default login.microsoftonline.com; another cloud's, or a test's)."""

    @classmethod
    def read(cls, raw: Mapping[str, object]) -> Credentials:
        r = ConfigReader(raw, "credentials.")
        kind = r.string("type", "default") or "default"
        if kind not in ("default", "client_secret", "workload_identity", "managed_identity"):
            raise ValueError(
                "credentials.type must be default, client_secret, workload_identity "
                "or managed_identity"
            )
        creds = cls(
            kind=kind,  # type: ignore[arg-type]
            tenant_id=r.string("tenant_id") or os.environ.get("AZURE_TENANT_ID"),
            client_id=r.string("client_id") or os.environ.get("AZURE_CLIENT_ID"),
            client_secret=r.string("client_secret") or os.environ.get("AZURE_CLIENT_SECRET"),
            token_file=r.string("token_file") or os.environ.get("AZURE_FEDERATED_TOKEN_FILE"),
            authority=r.string("authority") or os.environ.get("AZURE_AUTHORITY_HOST"),
        )
        r.finish()
        if kind == "client_secret" and not (
            creds.tenant_id and creds.client_id and creds.client_secret
        ):
            raise ValueError("client_secret credentials need tenant_id, client_id, client_secret")
        if kind == "workload_identity" and not (
            creds.tenant_id and creds.client_id and creds.token_file
        ):
            raise ValueError("workload_identity credentials need tenant_id, client_id, token_file")
        return creds


@dataclass(frozen=True)
class Network:
    """How groups are reached: a public IP (optionally with a DNS label), or a subnet."""

    subnet_ids: tuple[str, ...] = ()
    """Resource IDs of delegated subnets; when set, groups get private IPs there."""
    dns_label_prefix: str | None = None
    """Public groups get the DNS label `<prefix>-<pod name>` (unique per region)."""
    dns_servers: tuple[str, ...] = ()
    dns_search_domains: tuple[str, ...] = ()


@dataclass(frozen=True)
class AciConfig:
    """Where a node's container groups live and how vkpy watches them."""

    subscription_id: str
    resource_group: str
    region: str
    credentials: Credentials = field(default_factory=Credentials)
    arm_endpoint: str = "https://management.azure.com"
    arm_audience: str = "https://management.azure.com"
    ca_bundle: str | None = None
    """A CA file to trust for Azure's endpoints (a private cloud's, or a test's)."""
    os_type: Literal["Linux", "Windows"] = "Linux"
    network: Network = field(default_factory=Network)
    gpu_sku: str | None = None
    """GPU SKU for pods asking for nvidia.com/gpu without naming one (K80, P100, V100)."""
    gpu_capacity: int = 0
    """nvidia.com/gpu the node advertises (0: none, and GPU pods are not scheduled here)."""
    spot: bool = False
    """Run every pod at Spot priority (a pod can ask with vkpy.io/aci-priority too)."""
    log_analytics_workspace: str | None = None
    log_analytics_key: str | None = field(default=None, repr=False)
    storage_account_keys: Mapping[str, str] = field(default_factory=dict, repr=False)
    """Keys of the storage accounts whose Azure File shares pods may mount."""
    capacity: Mapping[str, str] = field(default_factory=lambda: dict(DEFAULT_CAPACITY))
    poll_interval: float = 5.0
    """Seconds between list calls that notice state changes."""
    refresh_interval: float = 30.0
    """Seconds after which a steady group's instance view is read again."""
    log_poll_interval: float = 2.0
    """Seconds between reads of the logs API while following logs."""
    retry_attempts: int = 6
    """How often the SDK retries a throttled (429) or failed (5xx) call itself."""
    retry_backoff: float = 0.8
    """The SDK's back-off factor (seconds) between retries without Retry-After."""

    @classmethod
    def from_dict(cls, raw: Mapping[str, object], os_type: str | None = None) -> AciConfig:
        r = ConfigReader(raw)
        network = ConfigReader(r.mapping("network"), "network.")
        net = Network(
            subnet_ids=network.strings("subnet_ids"),
            dns_label_prefix=network.string("dns_label_prefix"),
            dns_servers=network.strings("dns_servers"),
            dns_search_domains=network.strings("dns_search_domains"),
        )
        network.finish()
        capacity = {
            **DEFAULT_CAPACITY,
            **{str(k): str(v) for k, v in r.mapping("capacity").items()},
        }
        wanted_os = (os_type or r.string("os_type", "Linux") or "Linux").lower()
        if wanted_os not in ("linux", "windows"):
            raise ValueError("os_type (or --os) must be linux or windows")
        config = cls(
            subscription_id=r.required("subscription_id"),
            resource_group=r.required("resource_group"),
            region=r.required("region"),
            credentials=Credentials.read(r.mapping("credentials")),
            arm_endpoint=(r.string("arm_endpoint") or cls.arm_endpoint).rstrip("/"),
            arm_audience=(r.string("arm_audience") or cls.arm_audience).rstrip("/"),
            ca_bundle=r.string("ca_bundle"),
            os_type="Windows" if wanted_os == "windows" else "Linux",
            network=net,
            gpu_sku=r.string("gpu_sku"),
            gpu_capacity=int(r.number("gpu_capacity", 0)),
            spot=r.boolean("spot", False),
            log_analytics_workspace=r.string("log_analytics_workspace"),
            log_analytics_key=r.string("log_analytics_key"),
            storage_account_keys={
                str(k): str(v) for k, v in r.mapping("storage_account_keys").items()
            },
            capacity=capacity,
            poll_interval=r.number("poll_interval", 5.0),
            refresh_interval=r.number("refresh_interval", 30.0),
            log_poll_interval=r.number("log_poll_interval", 2.0),
            retry_attempts=int(r.number("retry_attempts", 6)),
            retry_backoff=r.number("retry_backoff", 0.8),
        )
        r.finish()
        if config.gpu_sku is not None and config.gpu_sku not in ("K80", "P100", "V100"):
            raise ValueError("gpu_sku must be K80, P100 or V100")
        return config
