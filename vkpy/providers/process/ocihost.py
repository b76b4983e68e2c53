"""What a `runtime: oci` pod shares with the host: its namespaces and its users.

A pod runs in its sandbox's user, network, IPC and UTS namespaces (and a PID
namespace of its own). On a node whose `allow` setting lets it
(privileges.check_host_access refuses the pod otherwise, before anything starts):

- `hostNetwork`: its containers keep the host's network and UTS namespaces (the
  node's interfaces and hostname, as the kubelet gives them), still in the pod's
  user namespace;
- `hostUsers: true`: no user namespace, neither for the sandbox nor for the
  containers: the pod's ids are the host's, root in it is the host's root, its
  root filesystem unpacked with the image's own ids;
- `hostPID`, `hostIPC`: the host's PID or IPC namespace; both run the pod in the
  host's user namespace as well (as Kubernetes refuses them with `hostUsers: false`,
  and as the kernel mounts neither a /proc nor an mqueue of a namespace the pod's
  user namespace does not own).
"""

from __future__ import annotations

from collections.abc import Mapping

from vkpy.core.objects import KubeObject
from vkpy.providers.process.idranges import PodRange


def host_users(spec: KubeObject) -> bool:
    """Whether the pod runs in the host's user namespace (see the module docstring)."""
    return spec.get("hostUsers") is True or bool(spec.get("hostPID") or spec.get("hostIPC"))


def container_namespaces(
    spec: KubeObject, joined: Mapping[str, str | None]
) -> dict[str, str | None]:
    """The sandbox's namespaces a container joins (`joined`), less the host's ones
    the pod asks for (a kind left out is the host's)."""
    out = dict(joined)
    if spec.get("hostNetwork"):
        out.pop("network", None)
        out.pop("uts", None)
    if spec.get("hostPID"):
        out.pop("pid", None)
    if spec.get("hostIPC"):
        out.pop("ipc", None)
    if host_users(spec):
        out.pop("user", None)
    return out


def effective_range(spec: KubeObject, ids: PodRange) -> PodRange:
    """The host ids of the pod's ids: its range, or (host users) the ids themselves."""
    return PodRange(ids.slot, 0, ids.size) if host_users(spec) else ids
