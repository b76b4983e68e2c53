"""Pod admission: the checks the kubelet makes before it runs anything of a pod.

A pod the node must not run is rejected at once: Failed with the check's reason, the
message `Pod was rejected: <why>` and a Warning Event with the reason, as the
kubelet's rejectPod does. The checks are the kubelet's that apply to a virtual node:

- the operating system: `spec.os.name` other than the node's (PodOSNotSupported),
  or a `kubernetes.io/os` pod label other than the node's
  (PodOSSelectorNodeLabelDoesNotMatch);
- sysctls (SysctlForbidden): each of `spec.securityContext.sysctls` must be a safe
  sysctl (namespaced and isolated, the kubelet's list) or match a pattern the node
  allows (`--allowed-unsafe-sysctls`, names or prefixes ending in `*`, each known to
  be namespaced); a net sysctl is refused with hostNetwork and an IPC one with hostIPC.

Pure functions; the pod controller calls `admit` before creating a pod.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Literal

from vkpy.core.objects import KubeObject, labels_of, spec

Namespace = Literal["ipc", "net"]

SAFE_SYSCTLS = (
    "kernel.shm_rmid_forced",
    "net.ipv4.ip_local_port_range",
    "net.ipv4.tcp_syncookies",
    "net.ipv4.ping_group_range",
    "net.ipv4.ip_unprivileged_port_start",
    "net.ipv4.ip_local_reserved_ports",
    "net.ipv4.tcp_keepalive_time",
    "net.ipv4.tcp_fin_timeout",
    "net.ipv4.tcp_keepalive_intvl",
    "net.ipv4.tcp_keepalive_probes",
    "net.ipv4.tcp_rmem",
    "net.ipv4.tcp_wmem",
)
"""Sysctls every pod may set: namespaced, and without effect on other pods."""

_NAMESPACED_EXACT: dict[str, Namespace] = {"kernel.sem": "ipc"}
_NAMESPACED_PREFIXES: dict[str, Namespace] = {
    "kernel.shm": "ipc",
    "kernel.msg": "ipc",
    "fs.mqueue.": "ipc",
    "net.": "net",
}
_SEGMENT = r"[a-z0-9]([-_a-z0-9]*[a-z0-9])?"
_PATTERN = re.compile(rf"^({_SEGMENT}[./])*([a-z0-9][-_a-z0-9]*)?[a-z0-9*]$")
MAX_SYSCTL_LENGTH = 253


@dataclass(frozen=True)
class Rejection:
    reason: str
    message: str


def dotted(name: str) -> str:
    """A sysctl name with dots as separators (`net/ipv4/conf/eth0.100/rp_filter` ->
    `net.ipv4.conf.eth0/100.rp_filter`): when the first separator is a slash, slashes
    and dots swap."""
    first = re.search(r"[./]", name)
    if first is None or first.group() == ".":
        return name
    return name.translate(str.maketrans("./", "/."))


def namespace_of(name: str) -> Namespace | None:
    """The kernel namespace a sysctl (or a prefix of them) belongs to, if known."""
    if name in _NAMESPACED_EXACT:
        return _NAMESPACED_EXACT[name]
    for prefix, namespace in _NAMESPACED_PREFIXES.items():
        if name.startswith(prefix):
            return namespace
    return None


@dataclass(frozen=True)
class SysctlPolicy:
    """Which sysctls pods may set: the safe ones and the node's allowed patterns."""

    exact: dict[str, Namespace]
    prefixes: dict[str, Namespace]

    @classmethod
    def from_patterns(cls, unsafe: Iterable[str] = ()) -> SysctlPolicy:
        """The safe sysctls plus `unsafe` patterns; ValueError for a pattern that is
        malformed or not known to be namespaced (as the kubelet refuses to start)."""
        exact: dict[str, Namespace] = {}
        prefixes: dict[str, Namespace] = {}
        for raw in (*SAFE_SYSCTLS, *unsafe):
            if len(raw) > MAX_SYSCTL_LENGTH or not _PATTERN.match(raw):
                raise ValueError(
                    f"sysctl {raw!r} must have at most {MAX_SYSCTL_LENGTH} characters and "
                    "be dot- or slash-separated names, optionally ending in '*'"
                )
            name = dotted(raw)
            target = prefixes if name.endswith("*") else exact
            name = name.removesuffix("*")
            namespace = namespace_of(name)
            if namespace is None:
                raise ValueError(f"the sysctl(s) {raw!r} are not known to be namespaced")
            target[name] = namespace
        return cls(exact, prefixes)

    def check(self, name: str, host_network: bool, host_ipc: bool) -> str | None:
        """Why `name` may not be set by this pod, or None."""
        name = dotted(name)
        namespace = self.exact.get(name)
        if namespace is None:
            namespace = next((ns for p, ns in self.prefixes.items() if name.startswith(p)), None)
        if namespace is None:
            return f'"{name}" not allowlisted'
        if (namespace == "net" and host_network) or (namespace == "ipc" and host_ipc):
            return f'"{name}" not allowed with host {namespace} enabled'
        return None


def _os_rejection(pod: KubeObject, node_os: str) -> Rejection | None:
    label = labels_of(pod).get("kubernetes.io/os")
    if label is not None and label != node_os:
        return Rejection(
            "PodOSSelectorNodeLabelDoesNotMatch",
            "Failed to admit pod as the `kubernetes.io/os` label doesn't match node label",
        )
    wanted = (spec(pod).get("os") or {}).get("name")
    if wanted is not None and wanted != node_os:
        return Rejection(
            "PodOSNotSupported", "Failed to admit pod as the OS field doesn't match node OS"
        )
    return None


def admit(pod: KubeObject, node_os: str, sysctls: SysctlPolicy) -> Rejection | None:
    """Why the node must not run `pod`, or None when it may."""
    rejected = _os_rejection(pod, node_os)
    if rejected is not None:
        return rejected
    pod_spec = spec(pod)
    for sysctl in (pod_spec.get("securityContext") or {}).get("sysctls") or []:
        why = sysctls.check(
            str(sysctl.get("name", "")),
            bool(pod_spec.get("hostNetwork")),
            bool(pod_spec.get("hostIPC")),
        )
        if why is not None:
            return Rejection("SysctlForbidden", f"forbidden sysctl: {why}")
    return None
