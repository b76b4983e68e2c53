"""vkpy's settings: frozen dataclasses grouped by concern, built once from flags.

Flags, environment variables (`VKPY_<FLAG>`) and the provider's config file all map
onto these; the rest of the program receives only the group it needs.
"""

from __future__ import annotations

from dataclasses import dataclass

from vkpy.api.config import ApiSettings
from vkpy.fleet.leader import ElectionSettings
from vkpy.fleet.node_set import Member
from vkpy.kube.client import ClientOptions
from vkpy.node.heartbeat.node_status import NodeSettings
from vkpy.node.pods.pod_settings import PodControllerSettings

__all__ = ["ApiSettings", "Settings"]


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
