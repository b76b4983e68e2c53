"""The settings of the kubelet's behaviour: who the node is (NodeSettings, its taints)
and how its pods are run (PodControllerSettings), in the one settings module of node/.

The command line builds these from flags; importing them must not pull in the
controllers, the watch or the backend contract's machinery.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from vkpy.core.objects import KubeObject


@dataclass(frozen=True)
class Taint:
    key: str
    value: str
    effect: str

    @classmethod
    def parse(cls, text: str) -> Taint:
        """`key=value:Effect` or `key:Effect`."""
        head, sep, effect = text.rpartition(":")
        if not sep or effect not in ("NoSchedule", "PreferNoSchedule", "NoExecute") or not head:
            raise ValueError(f"invalid taint {text!r}: want key[=value]:Effect")
        key, _, value = head.partition("=")
        return cls(key, value, effect)

    def as_dict(self) -> KubeObject:
        out: KubeObject = {"key": self.key, "effect": self.effect}
        if self.value:
            out["value"] = self.value
        return out


@dataclass(frozen=True)
class NodeSettings:
    """Who this node is and how the API server reaches it."""

    name: str
    internal_ip: str
    """The address the API server dials for logs/exec (status.addresses InternalIP)."""
    port: int = 10250
    """The kubelet API port written to daemonEndpoints."""
    hostname: str = ""
    taints: tuple[Taint, ...] = ()
    labels: Mapping[str, str] = field(default_factory=dict)
    operating_system: str | None = None
    """Overrides the backend's OS (the `kubernetes.io/os` label and nodeInfo)."""
    status_interval: float = 60.0
    """Status is patched on change, and at least this often."""
    check_interval: float = 10.0
    """How often the backend is pinged."""
    lease_duration: int = 40
    lease_renew_interval: float = 10.0
    capacity: Mapping[str, str] = field(default_factory=dict)
    """Resources this node reports instead of the backend's (capacity and allocatable),
    by name; the rest stay the backend's (a node set gives each node its own)."""
    spread: bool = False
    """Start the lease and status loops at a random point of their period, so many
    nodes of one process do not all write in the same instant."""


@dataclass(frozen=True)
class PodControllerSettings:
    node_name: str
    host_ip: str
    workers: int = 50
    """Pods reconciled at once."""
    poll_interval: float = 5.0
    """How often a backend that cannot push is asked for every pod's state."""
    config_retry_max: float = 10.0
    """Longest wait before a pod whose containers cannot start (a missing ConfigMap or
    Secret, a backend refusing it: cannot_start) is tried again; the kubelet's sync
    back-off. A failed image pull waits for its own back-off (up to 5 min)."""
    default_grace_period: float = 30.0
    deletion_cost: int | None = None
    """`controller.kubernetes.io/pod-deletion-cost` written on the node's ReplicaSet
    pods (None: not written); see deletion_cost."""
    operating_system: str | None = None
    """The node's OS, when it overrides the backend's: pods for another are rejected."""
    allowed_unsafe_sysctls: tuple[str, ...] = ()
    """Sysctl names or patterns (ending in `*`) pods may set beyond the safe ones."""
    volume_sync_period: float = 60.0
    """How often a running pod's configMap, secret and projected volumes are resolved
    again (the kubelet's sync period), for backends that can rewrite them."""
