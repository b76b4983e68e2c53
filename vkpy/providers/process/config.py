"""Settings of the process backend (`--provider-config`), and what they resolve to.

Every field has a default that works on a fresh machine: pods under the state
directory, containers as `nobody` when vkpy runs as root (as vkpy's own user
otherwise), memory limits with cgroups when the host lets vkpy make them (a
watchdog otherwise), the kubelet's CrashLoopBackOff and log rotation figures, and
the host's CPUs and memory as the node's capacity. Which runtime and network a node
runs in by default depends on whether vkpy is root (modes.py): images through runc
on a network per pod as root, host programs on the host's network otherwise.
"""

from __future__ import annotations

import dataclasses
import os
import pwd
import shutil
import stat
import sys
from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Literal

from vkpy.core.quantity import QuantityError, parse_quantity
from vkpy.providers.process import modes
from vkpy.providers.process.addresses import parse_cidr
from vkpy.providers.process.images import ImageSpec, parse_images
from vkpy.providers.process.privileges import parse_allow

MemoryEnforcement = Literal["auto", "cgroup", "watchdog", "none"]
NetworkMode = Literal["host", "pod"]
RuntimeMode = Literal["host", "oci"]


def host_capacity(directory: str) -> dict[str, str]:
    """CPUs, memory and disk of this host, and the kubelet's default pod count."""
    memory = 0
    try:
        with open("/proc/meminfo") as handle:
            for line in handle:
                if line.startswith("MemTotal:"):
                    memory = int(line.split()[1]) * 1024
                    break
    except OSError:
        pass
    try:
        disk = shutil.disk_usage(directory).total
    except OSError:
        disk = 0
    return {
        "cpu": str(os.cpu_count() or 1),
        "memory": f"{memory // 1024}Ki",
        "pods": "110",
        "ephemeral-storage": f"{disk // 1024}Ki",
    }


@dataclass(frozen=True)
class RunAs:
    """The identity containers run with; None fields: vkpy's own."""

    uid: int | None
    gid: int | None
    groups: tuple[int, ...] = ()
    name: str = ""
    private_group: int | None = None
    """A group only this pod has (per-pod identities, see identity.py): the pod's
    directory and the files vkpy makes for it belong to root and this group."""
    fs_group: int | None = None
    """`runtime: oci`: the pod's fsGroup as a host id (ocivolumes.py); its volume files
    are then group-readable and their directories setgid, as the kubelet's
    SetVolumeOwnership makes them."""


def resolve_run_as(value: str | int | None) -> RunAs:
    """`name`, `uid` or `uid:gid`; by default `nobody` when vkpy is root, else no change."""
    if value is None or value == "":
        if os.geteuid() != 0:
            return RunAs(None, None, name=pwd.getpwuid(os.geteuid()).pw_name)
        value = "nobody"
    text = str(value)
    if text in ("root", "0", "0:0"):
        raise ValueError("run_as must not be root: pods would have the host's root")
    user, _, group = text.partition(":")
    if user.isdigit():
        uid = int(user)
        try:
            entry: pwd.struct_passwd | None = pwd.getpwuid(uid)
        except KeyError:
            entry = None
    else:
        try:
            entry = pwd.getpwnam(user)
        except KeyError:
            raise ValueError(f"run_as: no user {user!r} on this host") from None
        uid = entry.pw_uid
    if group:
        if not group.isdigit():
            raise ValueError(f"run_as: group must be numeric in {text!r}")
        gid = int(group)
    elif entry is not None:
        gid = entry.pw_gid
    else:
        gid = uid
    if os.geteuid() != 0 and uid != os.geteuid():
        raise ValueError(f"run_as {text!r} needs vkpy to run as root")
    if os.geteuid() != 0:
        return RunAs(None, None, name=entry.pw_name if entry else str(uid))
    return RunAs(uid, gid, (gid,), entry.pw_name if entry else str(uid))


def blocked_ancestor(path: Path, run_as: RunAs) -> Path | None:
    """The first directory above `path` the containers' user cannot traverse, if any.

    Containers reach their files by relative paths from their working directory, so
    they work regardless; but a program that turns its working directory into an
    absolute path (getcwd) needs every directory above it to be searchable."""
    if run_as.uid is None:
        return None
    groups = {run_as.gid, *run_as.groups}
    for directory in [path.resolve(), *path.resolve().parents]:
        try:
            info = directory.stat()
        except OSError:
            return directory
        if info.st_uid == run_as.uid:
            allowed = info.st_mode & stat.S_IXUSR
        elif info.st_gid in groups:
            allowed = info.st_mode & stat.S_IXGRP
        else:
            allowed = info.st_mode & stat.S_IXOTH
        if not allowed:
            return directory
    return None


@dataclass(frozen=True)
class ProcessConfig:
    """Settings of the process backend."""

    pods_dir: str = ""
    """Where pod directories live; default `<state-dir>/process/pods`."""
    run_as: str = ""
    """One user for every pod's containers: name, uid or uid:gid. Default (empty): when
    vkpy is root, each pod runs as an id of its own from `pod_uid_range`; when vkpy is
    not root, containers run as vkpy's user and this must be empty."""
    pod_namespaces: bool = True
    """When vkpy is root: each pod gets UTS (its hostname) and IPC namespaces of its
    own, shared by its containers (namespaces.py), and with `pod_filesystem` mount
    and PID namespaces. False: the fallback of a non-root vkpy (links in the pod
    directory)."""
    pod_filesystem: bool = True
    """With namespaces: each pod sees a filesystem of its own (podroot.py): the
    host's root (or `pod_root`) read-only, its volumes at their mount paths, a
    private /tmp, /etc/hosts, and only its own processes. False: volumes only as
    links in the pod directory."""
    pod_root: str = "/"
    """The host directory pods see as their root (read-only), with the filesystem."""
    network: NetworkMode = "host"
    """`host`: pods share the node's network (port-forward confined to the pod's own
    listening sockets). `pod` (needs root and `pod_namespaces`): a network namespace
    per pod with an address of its own from the pod CIDR (podnet.py). Default
    (from_dict, modes.py): `pod` when vkpy is root and the runtime is `oci`."""
    pod_cidr: str = ""
    """IPv4 CIDR the pods' addresses come from in `network: pod` (its first address is
    the node's end); the Node's spec.podCIDR, when set, is used instead. Default
    (from_dict) in `network: pod`: a /24 of the node's own (modes.default_pod_cidr)."""
    pod_uid_range: str = "200000-265535"
    """`first-last`: the uids (and gids) given to pods when vkpy is root, one per pod;
    `runAsUser`, `runAsGroup`, `fsGroup` and `supplementalGroups` must be inside it."""
    host_path_prefixes: tuple[str, ...] = ()
    """hostPath volumes are allowed only under these directories (none by default)."""
    allow: tuple[str, ...] = ()
    """What pods may ask for, refused otherwise (privileges.py): `privileged`,
    `capabilities` (capabilities.add granted), `hostNetwork`, `hostPID`, `hostIPC`,
    `unconfined` (seccompProfile Unconfined). None by default."""
    log_max_bytes: int = 10 * 2**20
    """A container's log file is rotated at this size (the kubelet's 10Mi)."""
    log_max_files: int = 3
    """Log files kept per container run, the current one included."""
    memory_enforcement: MemoryEnforcement = "auto"
    """How memory limits are enforced: cgroup, watchdog (the supervisor samples RSS
    and kills), none, or auto (cgroup when possible, else watchdog)."""
    cgroup_parent: str = ""
    """A cgroup directory vkpy may make container cgroups in (default: found at start)."""
    watchdog_interval: float = 0.25
    """Seconds between memory samples in watchdog mode."""
    backoff_base_seconds: float = 10.0
    """First CrashLoopBackOff delay (doubled on each crash)."""
    backoff_max_seconds: float = 300.0
    backoff_reset_seconds: float = 600.0
    """A container that ran this long without crashing starts its backoff afresh."""
    kubernetes_service_host: str = ""
    """When set, containers get KUBERNETES_SERVICE_HOST/PORT (and the KUBERNETES_PORT_*
    variables) pointing there, as the kubelet gives every container."""
    kubernetes_service_port: int = 443
    capacity: Mapping[str, str] = field(default_factory=dict)
    """Overrides of the node's capacity (default: this host's CPUs, memory, disk)."""
    python: str = sys.executable
    """Interpreter that runs the supervisors and the exec helper."""
    images: tuple[tuple[str, ImageSpec | None], ...] = ()
    """What runs on the host for an image (images.py): pattern -> entrypoint, cmd,
    path, working_dir, env (null: no entry); before the shipped defaults."""
    runtime: RuntimeMode = "host"
    """`host`: containers are host programs (the `images` stand-ins) with the host's
    root. `oci` (needs root and runc): each container runs its image through runc, in
    a user namespace of its own per pod (ocipods.py, ocicontainers.py). Default
    (from_dict, modes.py): `oci` when vkpy is root, else `host`."""
    runtime_defaulted: bool = False
    """Whether `runtime` is the default rather than the node's settings' (not a
    setting: what a start-up error says)."""
    registries: Mapping[str, object] = field(default_factory=dict)
    """`oci`: per registry host, `mirrors` and `insecure` (vkpy/oci/images/registries.py)."""
    oci_id_base: int = 1_000_000
    """`oci`: the first host id of the pods' ranges (65536 ids each, idranges.py)."""
    oci_id_ranges: int = 1024
    """`oci`: how many pods' ranges there are on this host."""
    runc: str = "runc"
    """`oci`: the OCI runtime's binary."""
    pod_infra_container_image: str = "registry.k8s.io/pause:3.10"
    """`oci`: the image of every pod's sandbox (the kubelet's
    `--pod-infra-container-image`), pulled through the `registries` mirrors."""
    state_dir: str = ""
    internal_ip: str = "127.0.0.1"
    node_name: str = ""

    @classmethod
    def from_dict(
        cls,
        raw: Mapping[str, object],
        *,
        state_dir: str,
        internal_ip: str,
        node_name: str = "",
        euid: int | None = None,
    ) -> ProcessConfig:
        """The settings in `raw`, checked, with the defaults that depend on whether vkpy
        runs as root (`euid`, vkpy's own by default): modes.py."""
        internal = {"state_dir", "internal_ip", "node_name", "runtime_defaulted"}
        known = {f.name for f in fields(cls)} - internal
        unknown = set(raw) - known
        if unknown:
            raise ValueError(f"unknown process settings: {', '.join(sorted(unknown))}")
        values: dict[str, object] = dict(raw)
        euid = os.geteuid() if euid is None else euid
        if "runtime" not in values:
            values["runtime"] = modes.default_runtime(euid)
            values["runtime_defaulted"] = True
        values.setdefault("network", modes.default_network(str(values["runtime"]), euid))
        prefixes = values.get("host_path_prefixes") or ()
        if isinstance(prefixes, str) or not isinstance(prefixes, list | tuple):
            raise ValueError("host_path_prefixes must be a list of directories")
        values["host_path_prefixes"] = tuple(os.path.abspath(str(p)) for p in prefixes)
        capacity = values.get("capacity") or {}
        if not isinstance(capacity, Mapping):
            raise ValueError("capacity must be a mapping")
        values["capacity"] = {str(k): str(v) for k, v in capacity.items()}
        values["images"] = parse_images(values.get("images"))
        values["allow"] = parse_allow(values.get("allow"))
        for name, value in values["capacity"].items():  # type: ignore[attr-defined]
            try:
                parse_quantity(value)
            except QuantityError as error:
                raise ValueError(f"capacity {name}: {error}") from None
        config = cls(**values, state_dir=state_dir, internal_ip=internal_ip, node_name=node_name)  # type: ignore[arg-type]
        if config.memory_enforcement not in ("auto", "cgroup", "watchdog", "none"):
            raise ValueError("memory_enforcement must be auto, cgroup, watchdog or none")
        if config.log_max_bytes < 4096 or config.log_max_files < 1:
            raise ValueError("log_max_bytes must be at least 4096 and log_max_files at least 1")
        if config.backoff_base_seconds <= 0 or config.backoff_max_seconds < 0:
            raise ValueError("backoff delays must be positive")
        if config.network not in ("host", "pod"):
            raise ValueError("network must be host or pod")
        if config.pod_cidr:
            parse_cidr(config.pod_cidr)
        if config.runtime not in ("host", "oci"):
            raise ValueError("runtime must be host or oci")
        if not isinstance(config.registries, Mapping):
            raise ValueError("registries must be a mapping of registry hosts")
        if config.oci_id_base < 65536 or config.oci_id_ranges < 1:
            raise ValueError("oci_id_base must be at least 65536 and oci_id_ranges at least 1")
        resolve_run_as(config.run_as)
        config.uid_range()
        if not os.path.isabs(config.pod_root):
            raise ValueError(f"pod_root must be an absolute directory, not {config.pod_root!r}")
        if config.network == "pod" and not config.pod_cidr:
            cidr = modes.default_pod_cidr(node_name, str(config.pods_path.absolute()))
            config = dataclasses.replace(config, pod_cidr=cidr)
        return config

    def uid_range(self) -> tuple[int, int]:
        """`pod_uid_range` as (first, last); ValueError when it is not a range."""
        first, sep, last = str(self.pod_uid_range).partition("-")
        if not sep or not first.strip().isdigit() or not last.strip().isdigit():
            raise ValueError(f"pod_uid_range must be first-last, not {self.pod_uid_range!r}")
        low, high = int(first), int(last)
        if low < 1000 or high < low:
            raise ValueError(f"pod_uid_range {self.pod_uid_range!r}: must be within 1000 and up")
        return low, high

    @property
    def namespaces_per_pod(self) -> bool:
        """Whether pods get namespaces of their own from namespaces.py (root, and
        `pod_namespaces`; in `oci` mode the pod sandbox holds them instead)."""
        return os.geteuid() == 0 and bool(self.pod_namespaces) and not self.oci

    @property
    def filesystem_per_pod(self) -> bool:
        """Whether pods get a mount namespace with their volumes at their mount paths."""
        return self.namespaces_per_pod and bool(self.pod_filesystem)

    @property
    def pod_network(self) -> bool:
        """Whether pods get a network namespace and an address of their own."""
        if self.oci:
            return self.network == "pod" and os.geteuid() == 0
        return self.network == "pod" and self.namespaces_per_pod

    @property
    def oci(self) -> bool:
        """Whether containers run their images through the OCI runtime."""
        return self.runtime == "oci"

    @property
    def per_pod_ids(self) -> bool:
        """Whether each pod runs as an id of its own (vkpy is root, no shared run_as)."""
        return os.geteuid() == 0 and not self.run_as and not self.oci

    @property
    def pods_path(self) -> Path:
        if self.pods_dir:
            return Path(self.pods_dir)
        return Path(self.state_dir or ".") / "process" / "pods"

    def node_capacity(self) -> dict[str, str]:
        existing = self.pods_path.absolute()
        while not existing.exists() and existing != existing.parent:
            existing = existing.parent
        capacity = host_capacity(str(existing))
        capacity.update(self.capacity)
        return capacity
