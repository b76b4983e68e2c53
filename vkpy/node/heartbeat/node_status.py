"""The Node object vkpy registers, and its status, built from settings and the backend.

Pure functions: what the scheduler, kubectl and the node lifecycle controller read
about this node (labels, taint, capacity, conditions, addresses, daemon endpoint,
nodeInfo). The node controller sends it; tests can check it without a cluster.
"""

from __future__ import annotations

import platform
from dataclasses import dataclass
from datetime import datetime

from vkpy import __version__
from vkpy.core.objects import KubeObject
from vkpy.core.rfc3339 import format_time
from vkpy.node.settings import NodeSettings
from vkpy.providers.base import NodeInfo, NodeResources

KUBELET_VERSION_BASE = "v1.36.0"


@dataclass(frozen=True)
class Health:
    ready: bool
    reason: str
    message: str


def labels(settings: NodeSettings, info: NodeInfo) -> dict[str, str]:
    out = {
        "type": "virtual-kubelet",
        "kubernetes.io/role": "agent",
        "kubernetes.io/hostname": settings.hostname or settings.name,
        "kubernetes.io/os": settings.operating_system or info.operating_system,
        "kubernetes.io/arch": info.architecture,
        "beta.kubernetes.io/os": settings.operating_system or info.operating_system,
        "beta.kubernetes.io/arch": info.architecture,
        "node.kubernetes.io/instance-type": f"vkpy-{info.runtime_name}",
    }
    out.update(info.labels)
    out.update(settings.labels)
    return out


def conditions(health: Health, now: datetime, previous: list[KubeObject]) -> list[KubeObject]:
    """Ready from the backend's health; the pressure conditions are always False."""
    before = {c.get("type"): c for c in previous}
    values = [
        ("Ready", health.ready, health.reason, health.message),
        ("MemoryPressure", False, "KubeletHasSufficientMemory", "kubelet has sufficient memory"),
        ("DiskPressure", False, "KubeletHasNoDiskPressure", "kubelet has no disk pressure"),
        ("PIDPressure", False, "KubeletHasSufficientPID", "kubelet has sufficient PID available"),
        ("NetworkUnavailable", False, "RouteCreated", "virtual node network is ready"),
    ]
    out = []
    for kind, ok, reason, message in values:
        value = "True" if ok else "False"
        old = before.get(kind) or {}
        out.append(
            {
                "type": kind,
                "status": value,
                "reason": reason,
                "message": message,
                "lastHeartbeatTime": format_time(now),
                "lastTransitionTime": old.get("lastTransitionTime")
                if old.get("status") == value
                else format_time(now),
            }
        )
    return out


def node_status(
    settings: NodeSettings,
    info: NodeInfo,
    resources: NodeResources,
    health: Health,
    now: datetime,
    previous: list[KubeObject] | None = None,
) -> KubeObject:
    return {
        "capacity": {**resources.capacity, **settings.capacity},
        "allocatable": {**resources.allocatable, **settings.capacity},
        "conditions": conditions(health, now, previous or []),
        "addresses": [
            {"type": "InternalIP", "address": settings.internal_ip},
            {"type": "Hostname", "address": settings.hostname or settings.name},
        ],
        "daemonEndpoints": {"kubeletEndpoint": {"Port": settings.port}},
        "nodeInfo": {
            "machineID": "",
            "systemUUID": "",
            "bootID": "",
            "kernelVersion": info.kernel_version or platform.release(),
            "osImage": info.os_image or f"vkpy {info.runtime_name}",
            "containerRuntimeVersion": f"{info.runtime_name}://{info.runtime_version}",
            "kubeletVersion": f"{KUBELET_VERSION_BASE}-vkpy-{__version__}",
            "kubeProxyVersion": "",
            "operatingSystem": settings.operating_system or info.operating_system,
            "architecture": info.architecture,
        },
    }


def node_object(
    settings: NodeSettings, info: NodeInfo, resources: NodeResources, health: Health, now: datetime
) -> KubeObject:
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": settings.name, "labels": labels(settings, info)},
        "spec": {"taints": [t.as_dict() for t in settings.taints]},
        "status": node_status(settings, info, resources, health, now),
    }


def comparable(status: KubeObject) -> KubeObject:
    """The status without heartbeat times, to tell a real change from a heartbeat."""
    return {
        **status,
        "conditions": [
            {k: v for k, v in c.items() if k not in ("lastHeartbeatTime", "lastTransitionTime")}
            for c in status.get("conditions") or []
        ],
    }
