"""An OCI runtime spec (a bundle's config.json) from plain data describing a container.

The process backend decides what a pod's container is (its command after the image's
config, its user, volumes, resources, security context); this module says it in the
OCI runtime spec's words, as containerd's CRI plugin does, so that runc builds the
container: namespaces (new, or joined by path: the pod sandbox's), the pod's user
namespace mappings, capabilities (containerd's default set, with the securityContext's
add/drop), no_new_privs from `allowPrivilegeEscalation`, seccomp (seccomp.py),
containerd's masked and read-only paths, the standard mounts, volumes as bind mounts,
cgroup resources from requests/limits, sysctls and rlimits.

Pure: no file is read (the seccomp profile is given loaded), nothing runs. A value that
cannot be said in a spec raises SpecError with what is wrong, before anything starts.
"""

from __future__ import annotations

import posixpath
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from vkpy.oci.runtime import seccomp

OCI_VERSION = "1.0.2"

ALL_CAPABILITIES = (
    "CAP_CHOWN",
    "CAP_DAC_OVERRIDE",
    "CAP_DAC_READ_SEARCH",
    "CAP_FOWNER",
    "CAP_FSETID",
    "CAP_KILL",
    "CAP_SETGID",
    "CAP_SETUID",
    "CAP_SETPCAP",
    "CAP_LINUX_IMMUTABLE",
    "CAP_NET_BIND_SERVICE",
    "CAP_NET_BROADCAST",
    "CAP_NET_ADMIN",
    "CAP_NET_RAW",
    "CAP_IPC_LOCK",
    "CAP_IPC_OWNER",
    "CAP_SYS_MODULE",
    "CAP_SYS_RAWIO",
    "CAP_SYS_CHROOT",
    "CAP_SYS_PTRACE",
    "CAP_SYS_PACCT",
    "CAP_SYS_ADMIN",
    "CAP_SYS_BOOT",
    "CAP_SYS_NICE",
    "CAP_SYS_RESOURCE",
    "CAP_SYS_TIME",
    "CAP_SYS_TTY_CONFIG",
    "CAP_MKNOD",
    "CAP_LEASE",
    "CAP_AUDIT_WRITE",
    "CAP_AUDIT_CONTROL",
    "CAP_SETFCAP",
    "CAP_MAC_OVERRIDE",
    "CAP_MAC_ADMIN",
    "CAP_SYSLOG",
    "CAP_WAKE_ALARM",
    "CAP_BLOCK_SUSPEND",
    "CAP_AUDIT_READ",
    "CAP_PERFMON",
    "CAP_BPF",
    "CAP_CHECKPOINT_RESTORE",
)
"""Every capability runc 1.1 knows, in linux/capability.h's order."""

DEFAULT_CAPABILITIES = (
    "CAP_CHOWN",
    "CAP_DAC_OVERRIDE",
    "CAP_FSETID",
    "CAP_FOWNER",
    "CAP_MKNOD",
    "CAP_NET_RAW",
    "CAP_SETGID",
    "CAP_SETUID",
    "CAP_SETFCAP",
    "CAP_SETPCAP",
    "CAP_NET_BIND_SERVICE",
    "CAP_SYS_CHROOT",
    "CAP_KILL",
    "CAP_AUDIT_WRITE",
)
"""containerd's (and the CRI's) default set for a container."""

MASKED_PATHS = (
    "/proc/acpi",
    "/proc/asound",
    "/proc/kcore",
    "/proc/keys",
    "/proc/latency_stats",
    "/proc/timer_list",
    "/proc/timer_stats",
    "/proc/sched_debug",
    "/proc/scsi",
    "/sys/firmware",
    "/sys/devices/virtual/powercap",
)
"""containerd's defaults: hidden from an unprivileged container."""

READONLY_PATHS = (
    "/proc/bus",
    "/proc/fs",
    "/proc/irq",
    "/proc/sys",
    "/proc/sysrq-trigger",
)
"""containerd's defaults: read-only in an unprivileged container."""

NAMESPACE_KINDS = ("pid", "network", "ipc", "uts", "mount", "user", "cgroup")
RLIMITS = frozenset(
    {
        "RLIMIT_AS",
        "RLIMIT_CORE",
        "RLIMIT_CPU",
        "RLIMIT_DATA",
        "RLIMIT_FSIZE",
        "RLIMIT_LOCKS",
        "RLIMIT_MEMLOCK",
        "RLIMIT_MSGQUEUE",
        "RLIMIT_NICE",
        "RLIMIT_NOFILE",
        "RLIMIT_NPROC",
        "RLIMIT_RSS",
        "RLIMIT_RTPRIO",
        "RLIMIT_RTTIME",
        "RLIMIT_SIGPENDING",
        "RLIMIT_STACK",
    }
)
CPU_PERIOD = 100_000
"""The CFS period (µs) the kubelet uses for CPU limits."""
MIN_SHARES = 2
MIN_QUOTA = 1000

SeccompKind = Literal["RuntimeDefault", "Unconfined", "Localhost"]


class SpecError(ValueError):
    """A container that cannot be said in an OCI spec, with why."""


@dataclass(frozen=True)
class IdMapping:
    """Ids `container_id` .. +size inside the user namespace are `host_id` .. outside."""

    container_id: int
    host_id: int
    size: int


def pod_mapping(host_base: int, size: int = 65536) -> tuple[IdMapping, ...]:
    """A pod's ids 0..size-1 mapped to the host range that starts at `host_base`."""
    return (IdMapping(0, host_base, size),)


@dataclass(frozen=True)
class BindMount:
    """A volume: the host path `source` at `destination` in the container."""

    source: str
    destination: str
    read_only: bool = False


@dataclass(frozen=True)
class Resources:
    """From a container's `resources`: CPU in millicores, memory in bytes."""

    cpu_request_milli: int | None = None
    cpu_limit_milli: int | None = None
    memory_limit: int | None = None
    pids_limit: int | None = None


@dataclass(frozen=True)
class Rlimit:
    type: str
    soft: int
    hard: int


@dataclass(frozen=True)
class Seccomp:
    """`seccompProfile`: with `Localhost`, `profile` is the loaded file; with
    `RuntimeDefault` it is the node's default profile (seccomp.RUNTIME_DEFAULT)."""

    kind: SeccompKind = "RuntimeDefault"
    profile: Mapping[str, Any] | None = None


@dataclass(frozen=True)
class Platform:
    """What the node decides: its architecture and kernel (for the seccomp profile's
    conditions) and whether it allows privileged containers."""

    machine: str
    kernel: tuple[int, int]
    allow_privileged: bool = False


@dataclass(frozen=True)
class Process:
    """What runs: also the process of a `runc exec` (kubectl exec) on its own."""

    args: Sequence[str]
    env: Mapping[str, str] = field(default_factory=dict)
    cwd: str = "/"
    uid: int = 0
    gid: int = 0
    additional_gids: Sequence[int] = ()
    terminal: bool = False


@dataclass(frozen=True)
class Security:
    """A container's securityContext, resolved by the caller (pod and container level)."""

    capabilities_add: Sequence[str] = ()
    capabilities_drop: Sequence[str] = ()
    privileged: bool = False
    allow_privilege_escalation: bool = True
    read_only_root: bool = False
    seccomp: Seccomp = field(default_factory=Seccomp)


@dataclass(frozen=True)
class Container:
    """One container, in plain data. `namespaces` maps an OCI namespace kind to None
    (a new one) or a path to join (`/proc/PID/ns/net` of the pod's sandbox); a kind
    not in it is the host's. A mount namespace is always new."""

    process: Process
    rootfs: str
    hostname: str | None = None
    namespaces: Mapping[str, str | None] = field(default_factory=dict)
    uid_mappings: Sequence[IdMapping] = ()
    gid_mappings: Sequence[IdMapping] = ()
    security: Security = field(default_factory=Security)
    volumes: Sequence[BindMount] = ()
    resources: Resources = field(default_factory=Resources)
    cgroups_path: str | None = None
    sysctls: Mapping[str, str] = field(default_factory=dict)
    rlimits: Sequence[Rlimit] = ()
    annotations: Mapping[str, str] = field(default_factory=dict)


def generate(container: Container, platform: Platform) -> dict[str, Any]:
    """The config.json of `container` on a node described by `platform`."""
    security = container.security
    if security.privileged and not platform.allow_privileged:
        raise SpecError("privileged containers are not allowed on this node")
    namespaces = _namespaces(container)
    user_ns = any(entry["type"] == "user" for entry in namespaces)
    if user_ns and not (container.uid_mappings and container.gid_mappings):
        raise SpecError("a user namespace needs uid and gid mappings")
    if not user_ns and (container.uid_mappings or container.gid_mappings):
        raise SpecError("uid/gid mappings need a user namespace")
    if not posixpath.isabs(container.rootfs):
        raise SpecError(f"rootfs must be an absolute path: {container.rootfs!r}")
    caps = capabilities(security)
    own_network = "network" in {entry["type"] for entry in namespaces}
    spec: dict[str, Any] = {
        "ociVersion": OCI_VERSION,
        "process": process(container.process, security, caps, container.rlimits),
        "root": {"path": container.rootfs, "readonly": security.read_only_root},
        "mounts": standard_mounts(privileged=security.privileged, sysfs=own_network or not user_ns)
        + [_bind(volume) for volume in container.volumes],
        "linux": {
            "namespaces": namespaces,
            "resources": resources(container.resources),
            "sysctl": dict(container.sysctls),
        },
    }
    if container.hostname is not None:
        if "uts" not in {entry["type"] for entry in namespaces}:
            raise SpecError("a hostname needs a UTS namespace")
        spec["hostname"] = container.hostname
    linux = spec["linux"]
    if user_ns:
        linux["uidMappings"] = [_mapping(m) for m in container.uid_mappings]
        linux["gidMappings"] = [_mapping(m) for m in container.gid_mappings]
    if container.cgroups_path is not None:
        if not posixpath.isabs(container.cgroups_path):
            raise SpecError(f"cgroupsPath must be absolute: {container.cgroups_path!r}")
        linux["cgroupsPath"] = container.cgroups_path
    if not security.privileged:
        linux["maskedPaths"] = list(MASKED_PATHS)
        linux["readonlyPaths"] = list(READONLY_PATHS)
        profile = _seccomp_profile(security.seccomp)
        if profile is not None:
            linux["seccomp"] = seccomp.to_oci(
                profile,
                machine=platform.machine,
                kernel=platform.kernel,
                capabilities=caps,
            )
    if container.annotations:
        spec["annotations"] = dict(container.annotations)
    return spec


def capabilities(security: Security) -> list[str]:
    """The bounding set: containerd's default, then `drop`, then `add` ("ALL" in
    either meaning every capability), as the CRI applies them; all when privileged."""
    if security.privileged:
        return list(ALL_CAPABILITIES)
    add = [_cap_name(name) for name in security.capabilities_add]
    drop = [_cap_name(name) for name in security.capabilities_drop]
    if "ALL" in add:
        return list(ALL_CAPABILITIES)
    kept = [] if "ALL" in drop else [cap for cap in DEFAULT_CAPABILITIES if cap not in drop]
    return kept + [cap for cap in add if cap not in kept]


def process(
    proc: Process,
    security: Security | None = None,
    caps: Sequence[str] | None = None,
    rlimits: Sequence[Rlimit] = (),
) -> dict[str, Any]:
    """The spec's `process` (also process.json for `runc exec`)."""
    security = security or Security()
    if not proc.args:
        raise SpecError("a process needs a command")
    if not posixpath.isabs(proc.cwd):
        raise SpecError(f"the working directory must be absolute: {proc.cwd!r}")
    for name, value in proc.env.items():
        if not name or "=" in name or "\0" in name or "\0" in value:
            raise SpecError(f"not an environment variable: {name!r}")
    for number in (proc.uid, proc.gid, *proc.additional_gids):
        if not 0 <= number < 2**32 - 1:
            raise SpecError(f"not a user or group id: {number}")
    caps = list(capabilities(security) if caps is None else caps)
    # As containerd: effective and permitted only for root; never inheritable
    # (CVE-2022-29162); no ambient set.
    held = caps if proc.uid == 0 else []
    out: dict[str, Any] = {
        "terminal": proc.terminal,
        "user": {"uid": proc.uid, "gid": proc.gid},
        "args": list(proc.args),
        "env": [f"{name}={value}" for name, value in proc.env.items()],
        "cwd": proc.cwd,
        "capabilities": {"bounding": caps, "effective": held, "permitted": held},
        "noNewPrivileges": not security.allow_privilege_escalation and not security.privileged,
    }
    # As containerd: the primary group is among the supplementary ones too.
    out["user"]["additionalGids"] = list(dict.fromkeys([proc.gid, *proc.additional_gids]))
    if rlimits:
        out["rlimits"] = [_rlimit(limit) for limit in rlimits]
    return out


def standard_mounts(*, privileged: bool = False, sysfs: bool = True) -> list[dict[str, Any]]:
    """/proc, /dev, /dev/pts, /dev/shm, /dev/mqueue, /sys (read-only) and the cgroup
    filesystem (read-only), as containerd mounts them. In a user namespace that does
    not own its network namespace the kernel refuses a new sysfs: `sysfs=False` binds
    the host's /sys (read-only) instead, as runc's rootless spec does."""
    ro = [] if privileged else ["ro"]
    sys_mount = (
        {
            "destination": "/sys",
            "type": "sysfs",
            "source": "sysfs",
            "options": ["nosuid", "noexec", "nodev", *ro],
        }
        if sysfs
        else {
            "destination": "/sys",
            "type": "none",
            "source": "/sys",
            "options": ["rbind", "nosuid", "noexec", "nodev", "ro"],
        }
    )
    return [
        {
            "destination": "/proc",
            "type": "proc",
            "source": "proc",
            "options": ["nosuid", "noexec", "nodev"],
        },
        {
            "destination": "/dev",
            "type": "tmpfs",
            "source": "tmpfs",
            "options": ["nosuid", "strictatime", "mode=755", "size=65536k"],
        },
        {
            "destination": "/dev/pts",
            "type": "devpts",
            "source": "devpts",
            "options": ["nosuid", "noexec", "newinstance", "ptmxmode=0666", "mode=0620", "gid=5"],
        },
        {
            "destination": "/dev/shm",  # noqa: S108 (a mount point in the container)
            "type": "tmpfs",
            "source": "shm",
            "options": ["nosuid", "noexec", "nodev", "mode=1777", "size=65536k"],
        },
        {
            "destination": "/dev/mqueue",
            "type": "mqueue",
            "source": "mqueue",
            "options": ["nosuid", "noexec", "nodev"],
        },
        sys_mount,
        {
            "destination": "/sys/fs/cgroup",
            "type": "cgroup",
            "source": "cgroup",
            "options": ["nosuid", "noexec", "nodev", "relatime", *ro],
        },
    ]


def resources(res: Resources) -> dict[str, Any]:
    """`linux.resources` as the kubelet sets them: CPU shares from the request (or the
    limit, which the API server copies into an absent request; 2 for best effort),
    CFS quota from the limit, the memory limit, a pids limit; no device but runc's
    defaults."""
    out: dict[str, Any] = {"devices": [{"allow": False, "access": "rwm"}]}
    request = res.cpu_request_milli if res.cpu_request_milli is not None else res.cpu_limit_milli
    cpu: dict[str, Any] = {"shares": max(MIN_SHARES, (request or 0) * 1024 // 1000)}
    if res.cpu_limit_milli is not None:
        if res.cpu_limit_milli <= 0:
            raise SpecError(f"a CPU limit must be positive: {res.cpu_limit_milli}m")
        cpu["quota"] = max(MIN_QUOTA, res.cpu_limit_milli * CPU_PERIOD // 1000)
        cpu["period"] = CPU_PERIOD
    out["cpu"] = cpu
    if res.memory_limit is not None:
        if res.memory_limit <= 0:
            raise SpecError(f"a memory limit must be positive: {res.memory_limit}")
        out["memory"] = {"limit": res.memory_limit}
    if res.pids_limit is not None:
        out["pids"] = {"limit": res.pids_limit}
    return out


def _namespaces(container: Container) -> list[dict[str, str]]:
    out = []
    wanted = {"mount": None, **container.namespaces}
    for kind in NAMESPACE_KINDS:
        if kind not in wanted:
            continue
        path = wanted[kind]
        if path is not None and not posixpath.isabs(path):
            raise SpecError(f"{kind} namespace path must be absolute: {path!r}")
        out.append({"type": kind} if path is None else {"type": kind, "path": path})
    unknown = set(wanted) - set(NAMESPACE_KINDS)
    if unknown:
        raise SpecError(f"unknown namespace kind(s): {', '.join(sorted(unknown))}")
    return out


def _seccomp_profile(choice: Seccomp) -> Mapping[str, Any] | None:
    if choice.kind == "Unconfined":
        return None
    if choice.profile is None:
        raise SpecError(f"seccomp {choice.kind} needs its profile loaded")
    return choice.profile


def _cap_name(name: str) -> str:
    bare = name.upper().removeprefix("CAP_")
    if bare == "ALL":
        return bare
    full = f"CAP_{bare}"
    if full not in ALL_CAPABILITIES:
        raise SpecError(f"unknown capability: {name!r}")
    return full


def _bind(volume: BindMount) -> dict[str, Any]:
    if not posixpath.isabs(volume.source) or not posixpath.isabs(volume.destination):
        raise SpecError(f"a volume needs absolute paths: {volume.source} at {volume.destination}")
    if ".." in volume.destination.split("/"):
        raise SpecError(f"a mount path may not contain '..': {volume.destination!r}")
    options = ["rbind", "rprivate", "nosuid", "nodev"]
    if volume.read_only:
        options.append("ro")
    return {
        "destination": volume.destination,
        "type": "bind",
        "source": volume.source,
        "options": options,
    }


def _mapping(mapping: IdMapping) -> dict[str, int]:
    if mapping.size <= 0 or mapping.host_id < 0 or mapping.container_id < 0:
        raise SpecError(f"not an id mapping: {mapping}")
    return {"containerID": mapping.container_id, "hostID": mapping.host_id, "size": mapping.size}


def _rlimit(limit: Rlimit) -> dict[str, Any]:
    if limit.type not in RLIMITS:
        raise SpecError(f"unknown rlimit: {limit.type!r}")
    if not 0 <= limit.soft <= limit.hard:
        raise SpecError(f"{limit.type}: soft limit {limit.soft} above hard {limit.hard}")
    return {"type": limit.type, "soft": limit.soft, "hard": limit.hard}
