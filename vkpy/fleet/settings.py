"""vkpy's settings: frozen dataclasses grouped by concern, built once from flags.

Flags, environment variables (`VKPY_<FLAG>`) and the provider's config file all map
onto these; the rest of the program receives only the group it needs.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from vkpy.api.settings import ApiSettings
from vkpy.fleet.node_set import Member
from vkpy.kube.client import ClientOptions
from vkpy.node.settings import NodeSettings, PodControllerSettings

__all__ = ["ApiSettings", "ElectionSettings", "Settings"]


@dataclass(frozen=True)
class ElectionSettings:
    """`--leader-elect*`: which Lease, who we are, and the timings."""

    namespace: str
    """Namespace of the Lease (`--leader-elect-resource-namespace`, default: vkpy's own)."""
    name: str
    """Name of the Lease (`--leader-elect-resource-name`, default vkpy-<node>)."""
    identity: str
    """This replica's name in `holderIdentity` (default: host name and a random part)."""
    lease_duration: float = 15.0
    """How long a candidate waits after the last renewal it saw before taking over."""
    renew_deadline: float = 10.0
    """How long the leader keeps writing after its last successful renewal."""
    retry_period: float = 2.0
    """Seconds between tries to acquire or renew."""
    labels: Mapping[str, str] = field(default_factory=dict)
    """Labels written on the Lease (a node set's Leases are listed by them)."""

    def __post_init__(self) -> None:
        if not 0 < self.retry_period < self.renew_deadline < self.lease_duration:
            raise ValueError(
                "leader election wants retry period < renew deadline < lease duration, got "
                f"{self.retry_period} < {self.renew_deadline} < {self.lease_duration}"
            )


@dataclass(frozen=True)
class Settings:
    kube: ClientOptions
    node: NodeSettings
    pods: PodControllerSettings
    api: ApiSettings
    provider: str
    """Backend name (`--provider`)."""
    provider_config: dict[str, object]
    """The backend's own settings, read from `--provider-config`."""
    state_dir: str
    """Where backends keep what must outlive vkpy (records, logs, pod directories)."""
    startup_timeout: float = 60.0
    """How long to keep trying to reach the API server before giving up."""
    health_port: int = 0
    """Plain-HTTP port of /healthz and /readyz for the pod's probes (0: off)."""
    health_bind_address: str = "0.0.0.0"
    """Address of the health port (the kubelet probes the pod's IP)."""
    election: ElectionSettings | None = None
    """Leader election among replicas (`--leader-elect`); None: this process leads."""
    node_set: tuple[Member, ...] = ()
    """The nodes this process serves when it serves a set (`--nodes`, `--node-set`);
    empty: the one node of `node`."""
