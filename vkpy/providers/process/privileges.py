"""What a pod may ask of the host's privileges, and what its processes then keep.

A kubelet hands `privileged`, added capabilities, the host's namespaces and an
unconfined seccomp profile to whoever may create pods; on a node whose pods are host
processes each of these is a way out of the sandbox, so the process backend refuses
them (the pod Failed with reason `UnsupportedSecurityContext`, a Warning Event
saying which setting) unless the node's `allow` setting lists them:

- `privileged`: the container runs as the pod's user with every capability vkpy has
  (ambient), without `no_new_privs` and without the seccomp filter: the host's root
  in all but name;
- `capabilities`: `capabilities.add` granted for real (ambient capabilities of the
  pod's user; the filter lets through the calls they exist for, seccomp.py);
- `hostNetwork`, `hostPID`, `hostIPC`: the pod keeps the host's namespace;
- `unconfined`: `seccompProfile: Unconfined` runs without the seccomp filter
  (capabilities and `no_new_privs` stay as they are);
- `hostUsers` (`runtime: oci` only, where every pod has a user namespace of its
  own): `hostUsers: true` runs the pod in the host's user namespace, root in it the
  host's root; `hostPID` and `hostIPC` need it too (ocihost.py).

In `runtime: oci` the runtime confines containers (capabilities and seccomp inside
the pod's user namespace, spec.py): `check_host_access` checks only what reaches the
host itself (its namespaces, its users, `privileged`), with the same refusal.

`seccompProfile: Localhost` is always refused: no profile files are read. Granting
capabilities needs vkpy to run as root; without it they are refused even if allowed.
`confinement` turns a container's settings into what seccomp.py applies.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from dataclasses import dataclass

from vkpy.core.objects import KubeObject
from vkpy.providers.base import ContainerConfig, PodConfig
from vkpy.providers.errors import UnsupportedError
from vkpy.providers.process.seccomp import CAPABILITIES, bare_capability

REASON = "UnsupportedSecurityContext"
ALLOWANCES = (
    "privileged",
    "capabilities",
    "hostNetwork",
    "hostPID",
    "hostIPC",
    "unconfined",
    "hostUsers",
)
HOST_NAMESPACES = {
    "hostNetwork": "the host's network",
    "hostPID": "the host's process namespace",
    "hostIPC": "the host's IPC namespace",
}


def parse_allow(raw: object) -> tuple[str, ...]:
    """The `allow` setting: a list of ALLOWANCES; ValueError otherwise."""
    if raw is None or raw == "":
        return ()
    values = [raw] if isinstance(raw, str) else raw
    if not isinstance(values, list | tuple):
        raise ValueError("allow must be a list of " + ", ".join(ALLOWANCES))
    unknown = [str(v) for v in values if v not in ALLOWANCES]
    if unknown:
        raise ValueError(f"allow: unknown {', '.join(unknown)} (known: {', '.join(ALLOWANCES)})")
    return tuple(str(v) for v in values)


def _security(obj: KubeObject | None) -> KubeObject:
    return (obj or {}).get("securityContext") or {}


def _not_allowed(what: str, asks: str, allowance: str) -> UnsupportedError:
    return UnsupportedError(
        f"{what} asks for {asks}, which this node does not allow (the process backend's "
        f"`allow` setting does not list {allowance})",
        reason=REASON,
    )


def added_capabilities(container: KubeObject) -> tuple[str, ...]:
    """`capabilities.add` as bare names (`ALL` spelled out); ValueError if unknown."""
    names: list[str] = []
    for raw in (_security(container).get("capabilities") or {}).get("add") or []:
        bare = bare_capability(str(raw))
        if bare == "ALL":
            names.extend(CAPABILITIES)
        elif bare in CAPABILITIES:
            names.append(bare)
        else:
            raise ValueError(f"unknown capability {raw!r}")
    return tuple(dict.fromkeys(names))


def seccomp_type(pod_spec: KubeObject, container: KubeObject) -> str:
    """The container's seccomp profile type (its own, else the pod's; RuntimeDefault)."""
    profile = _security(container).get("seccompProfile") or _security(pod_spec).get(
        "seccompProfile"
    )
    return str((profile or {}).get("type") or "RuntimeDefault")


def check_containers(
    containers: Iterable[ContainerConfig],
    allow: Iterable[str],
    pod_spec: KubeObject | None = None,
    tolerated: frozenset[str] = frozenset(),
) -> None:
    """Refuse containers asking for what the node does not allow (`tolerated`
    capabilities are let through, not granted: ephemeral containers)."""
    allowed = frozenset(allow)
    root = os.geteuid() == 0
    for container in containers:
        mine = _security(container.spec)
        what = f"container {container.name!r}"
        if mine.get("privileged"):
            if "privileged" not in allowed:
                raise _not_allowed(what, "privileged mode", "privileged")
            if not root:
                raise UnsupportedError(
                    f"{what} asks to be privileged, which needs vkpy to run as root",
                    reason=REASON,
                )
        try:
            asked = added_capabilities(container.spec)
        except ValueError as error:
            raise UnsupportedError(f"{what}: {error}", reason=REASON) from None
        added = [c for c in asked if "capabilities" in allowed or c not in tolerated]
        if added and "capabilities" not in allowed:
            raise _not_allowed(what, f"capabilities {', '.join(added)}", "capabilities")
        if added and not root:
            raise UnsupportedError(
                f"{what} asks for capabilities {', '.join(added)}, which need vkpy to run as root",
                reason=REASON,
            )
        kind = seccomp_type(pod_spec or {}, container.spec)
        if kind == "Localhost":
            raise UnsupportedError(
                f"{what} asks for a Localhost seccomp profile, which the process backend "
                "does not read (use RuntimeDefault, its own filter)",
                reason=REASON,
            )
        if kind == "Unconfined" and "unconfined" not in allowed:
            raise _not_allowed(what, "seccompProfile Unconfined", "unconfined")
        if kind not in ("RuntimeDefault", "Unconfined", "Localhost"):
            raise UnsupportedError(f"{what}: unknown seccompProfile type {kind!r}", reason=REASON)


def _check_host_namespaces(spec: KubeObject, allowed: frozenset[str]) -> None:
    for key, asks in HOST_NAMESPACES.items():
        if spec.get(key) and key not in allowed:
            raise _not_allowed("the pod", f"{key} ({asks})", key)


def check_host_access(pod: PodConfig, allow: Iterable[str]) -> None:
    """`runtime: oci`: refuse a pod asking for the host's namespaces, its users
    (`hostUsers: true`; hostPID and hostIPC, which run without a user namespace) or
    privileged containers, unless the node allows each."""
    allowed = frozenset(allow)
    spec: KubeObject = pod.pod.get("spec") or {}
    _check_host_namespaces(spec, allowed)
    for key in ("hostPID", "hostIPC"):
        if spec.get(key) and "hostUsers" not in allowed:
            raise _not_allowed(
                "the pod",
                f"{key}, which runs it in the host's user namespace (as Kubernetes, which "
                f"refuses {key} with hostUsers: false)",
                "hostUsers",
            )
    if spec.get("hostUsers") is True and "hostUsers" not in allowed:
        raise _not_allowed("the pod", "hostUsers: true (root in it the host's root)", "hostUsers")
    for container in (*pod.init_containers, *pod.containers, *pod.ephemeral_containers):
        if _security(container.spec).get("privileged") and "privileged" not in allowed:
            raise _not_allowed(f"container {container.name!r}", "privileged mode", "privileged")


def check_pod(pod: PodConfig, allow: Iterable[str]) -> None:
    """Refuse a pod asking for what the node does not allow."""
    allowed = frozenset(allow)
    spec: KubeObject = pod.pod.get("spec") or {}
    _check_host_namespaces(spec, allowed)
    containers = (*pod.init_containers, *pod.containers, *pod.ephemeral_containers)
    check_containers(containers, allowed, spec)


@dataclass(frozen=True)
class Confinement:
    """What seccomp.py applies to a container's processes."""

    capabilities: tuple[str, ...] = ()
    privileged: bool = False
    seccomp: bool = True


def confinement(pod: PodConfig, container: ContainerConfig, allow: Iterable[str]) -> Confinement:
    """A checked container's confinement: what it asked for and the node allows; a
    capability tolerated but not allowed (kubectl debug's SYS_PTRACE) is not granted."""
    allowed = frozenset(allow)
    spec: KubeObject = pod.pod.get("spec") or {}
    privileged = bool(_security(container.spec).get("privileged")) and "privileged" in allowed
    caps = added_capabilities(container.spec) if "capabilities" in allowed else ()
    unconfined = seccomp_type(spec, container.spec) == "Unconfined" and "unconfined" in allowed
    return Confinement(caps, privileged, not unconfined)
