"""The pod controller's settings, apart from the controller so flags parse cheaply.

The CLI builds these from flags; importing them must not pull in the controller,
the watch and the backend contract's machinery.
"""

from __future__ import annotations

from dataclasses import dataclass


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
