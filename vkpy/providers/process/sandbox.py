"""What a pod's filesystem view holds, decided on vkpy's side (root, namespaces on).

The view itself is built by the pod's namespace holder (podroot.py: the host's root
read-only, vkpy's state hidden, private /tmp, /etc/hosts) and by each process of a
container (podmounts.py: the container's volumes at their mount paths). This module
gives them what they need: the holder's plan (namespaces.start writes it), the
pod's hosts file, and per container the list of mounts `[base, relative,
mountPath, readOnly]` kept in the container's process context, where `base` is a
path vkpy made or the admin allowed (followed) and `relative` is the part a pod
may control (walked without following links). Volumes the kubelet makes
(configMap, secret, downwardAPI, projected) are always read-only, as with the
kubelet. The termination message file is mounted at `terminationMessagePath`. A
`medium: Memory` emptyDir is a tmpfs mounted on its directory on the host (as the
kubelet does), sized by `sizeLimit`.
"""

from __future__ import annotations

import contextlib
import ipaddress
import os
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from vkpy.core.objects import KubeObject
from vkpy.core.quantity import QuantityError, parse_quantity
from vkpy.providers.base import ContainerConfig, PodConfig, VolumeConfig
from vkpy.providers.process import mountcalls, namespaces
from vkpy.providers.process.config import ProcessConfig
from vkpy.providers.process.layout import PodDir
from vkpy.providers.process.termination import MESSAGE_FILE, message_path
from vkpy.providers.process.validation import clean_absolute, clean_relative

STAGING = "sandbox"
HOSTS = "etc-hosts"
HOSTNAME = "etc-hostname"
KUBELET_MADE = frozenset({"configMap", "secret", "downwardAPI", "projected"})

MountEntry = tuple[str, str, str, bool]
"""(base, relative, mountPath, readOnly): see the module docstring."""


SERVICE_NAMES = tuple(
    f"kubernetes{suffix}"
    for suffix in ("", ".default", ".default.svc", f".default.svc.{namespaces.CLUSTER_DOMAIN}")
)


def hosts_file(pod: PodConfig, ip: str, service_host: str | None = None) -> str:
    """The pod's /etc/hosts, as the kubelet writes it; with `service_host` (an IP
    address: `kubernetes_service_host`), also the `kubernetes` Service's names, which a
    cluster's DNS would answer (this node has none)."""
    spec = pod.pod.get("spec") or {}
    name, domain = namespaces.host_and_domain(spec, pod.ref.name, pod.ref.namespace)
    lines = [
        "# Kubernetes-managed hosts file.",
        "127.0.0.1\tlocalhost",
        "::1\tlocalhost ip6-localhost ip6-loopback",
        "fe00::0\tip6-localnet",
        "fe00::0\tip6-mcastprefix",
        "fe00::1\tip6-allnodes",
        "fe00::2\tip6-allrouters",
    ]
    if domain:
        lines.append(f"{ip}\t{name}.{domain}\t{name}")
    else:
        lines.append(f"{ip}\t{name}")
    if service_host and _is_address(service_host):
        lines.append("")
        lines.append("# The kubernetes Service (no cluster DNS on this node).")
        lines.append(f"{service_host}\t" + "\t".join(SERVICE_NAMES))
    return "\n".join(lines + _alias_lines(spec)) + "\n"


def host_network_hosts_file(pod: PodConfig, node_hosts: str) -> str:
    """A hostNetwork pod's /etc/hosts, as the kubelet writes it: the node's own
    (`node_hosts`) under a header of its own, then the pod's hostAliases."""
    lines = ["# Kubernetes-managed hosts file (host network).", *node_hosts.splitlines()]
    return "\n".join(lines + _alias_lines(pod.pod.get("spec") or {})) + "\n"


def _alias_lines(spec: KubeObject) -> list[str]:
    aliases = spec.get("hostAliases") or []
    if not aliases:
        return []
    lines = ["", "# Entries added by HostAliases."]
    for alias in aliases:
        names = "\t".join(str(h) for h in alias.get("hostnames") or [])
        lines.append(f"{alias.get('ip')}\t{names}")
    return lines


def _is_address(host: str) -> bool:
    try:
        ipaddress.ip_address(host)
    except ValueError:
        return False
    return True


def plan(
    config: ProcessConfig,
    pod_dir: PodDir,
    pod: PodConfig,
    ip: str,
    image_files: Sequence[tuple[str, str]] = (),
) -> dict[str, Any]:
    """The holder's plan (podroot.py; namespaces.start adds its own fields and writes
    it); the files it binds are written here. `image_files`: (path, host file) of the
    containers' images (images.py), bound read-only at their paths."""
    spec: KubeObject = pod.pod.get("spec") or {}
    files: list[list[str]] = []
    if not spec.get("hostNetwork"):
        hosts = pod_dir.path / HOSTS
        hosts.write_text(hosts_file(pod, ip, config.kubernetes_service_host))
        os.chmod(hosts, 0o644)
        hostname = pod_dir.path / HOSTNAME
        hostname.write_text(namespaces.hostname(spec, pod.ref.name, pod.ref.namespace) + "\n")
        os.chmod(hostname, 0o644)
        files = [[str(hosts), "/etc/hosts"], [str(hostname), "/etc/hostname"]]
    else:
        hosts = pod_dir.path / HOSTS
        root = config.pod_root or "/"
        try:
            node_hosts = Path(root, "etc", "hosts").read_text()
        except OSError:
            node_hosts = ""
        hosts.write_text(host_network_hosts_file(pod, node_hosts))
        os.chmod(hosts, 0o644)
        files = [[str(hosts), "/etc/hosts"]]
    for target, source in image_files:
        if os.path.isfile(source):
            files.append([os.path.realpath(source), target])
    staging = pod_dir.path / STAGING
    staging.mkdir(mode=0o700, exist_ok=True)
    hide = [str(config.pods_path.absolute())]
    if config.state_dir:
        hide.append(str(Path(config.state_dir).absolute()))
    return {
        "root": config.pod_root,
        "pod_dir": str(pod_dir.path.absolute()),
        "staging": str(staging.absolute()),
        "hide": hide,
        "files": files,
        "readonly": written_volumes(pod_dir, pod),
        "tmpfs": ["/tmp", "/dev/shm"],  # noqa: S108 (the pod's own tmpfs)
        "mountpoints": mountpoints(pod_dir, pod),
        "expose": exposed(config),
    }


def written_volumes(pod_dir: PodDir, pod: PodConfig) -> list[str]:
    """The directories of the volumes vkpy writes (made now, before their files, so
    the holder can bind them read-only in the pod's directory)."""
    found = []
    for volume in pod.volumes:
        if volume.kind in KUBELET_MADE:
            path = pod_dir.volume(volume.name)
            pod_dir.volumes.mkdir(mode=0o711, exist_ok=True)
            path.mkdir(mode=0o755, exist_ok=True)
            found.append(str(path.absolute()))
    return found


def exposed(config: ProcessConfig) -> list[str]:
    """Host directories the pod's programs come from that its own /tmp would hide
    (a checkout or virtualenv under /tmp: the stand-in images, the interpreter; the
    `images` setting's paths): bound back read-only at their paths."""
    import vkpy  # noqa: PLC0415 (where this checkout is)

    candidates = {
        str(Path(vkpy.__file__).resolve().parent.parent),
        sys.prefix,
        sys.base_prefix,
        os.path.dirname(os.path.realpath(config.python)),
        os.path.dirname(os.path.dirname(os.path.realpath(config.python))),
    }
    for _, image in config.images:
        if image is not None:
            candidates.update(image.path)
            candidates.update(os.path.dirname(e) for e in image.entrypoint[:1] if e.startswith("/"))
    found = set()
    for candidate in candidates:
        real = os.path.realpath(candidate)
        if real.startswith(("/tmp/", "/dev/shm/")) and os.path.isdir(real):  # noqa: S108
            found.add(real)
    return sorted(found)


def mountpoints(pod_dir: PodDir, pod: PodConfig) -> list[list[object]]:
    """Every mount path of the pod's containers, [path, is a directory]: the holder
    makes them once (podroot.py), so its processes need not shadow anything."""
    found: dict[str, bool] = {}
    volumes = {v.name: v for v in pod.volumes}
    for container in (*pod.init_containers, *pod.containers):
        for mount in container.spec.get("volumeMounts") or []:
            volume = volumes.get(str(mount.get("name", "")))
            target = "/" + str(mount.get("mountPath", "")).strip("/")
            if volume is None or target == "/":
                continue
            sub_path = str(mount.get("subPath") or "").strip("/")
            found[target] = _mounts_a_directory(volume, sub_path)
    return [[path, directory] for path, directory in sorted(found.items())]


def _mounts_a_directory(volume: VolumeConfig, sub_path: str) -> bool:
    """Whether the volume (at `sub_path`) is a directory: a hostPath is what is on the
    host (a file for the `File` types, made before the pod starts), a kubelet-made
    volume's key by subPath a file, everything else a directory."""
    if volume.kind == "hostPath":
        path = os.path.join(str(volume.source.get("path", "")), sub_path)
        if os.path.lexists(path):
            return os.path.isdir(path)
        return sub_path != "" or volume.source.get("type") not in ("File", "FileOrCreate")
    return not (sub_path and sub_path in {f.path for f in volume.files})


def container_mounts(
    pod_dir: PodDir, pod: PodConfig, container: ContainerConfig, prefixes: Sequence[str] = ()
) -> tuple[MountEntry, ...]:
    """Where the container's volumes go (see the module docstring); `prefixes`: the
    node's host_path_prefixes, the part of a hostPath the admin allowed."""
    volumes = {v.name: v for v in pod.volumes}
    entries: list[MountEntry] = []
    for mount in container.spec.get("volumeMounts") or []:
        volume = volumes.get(str(mount.get("name", "")))
        if volume is None:
            continue
        target = "/" + clean_absolute(str(mount.get("mountPath", "")), "mountPath")
        sub_path = clean_relative(str(mount.get("subPath") or ""), "subPath")
        readonly = bool(mount.get("readOnly"))
        entry = _entry(pod_dir, volume, sub_path, target, readonly, prefixes)
        if entry is not None:
            entries.append(entry)
    message = message_path(container.spec)
    if message:
        # The container's termination message file (termination.py makes it before
        # each run), at terminationMessagePath itself, writable on a read-only root.
        cdir = pod_dir.container(container.name).path.absolute()
        entries.append((str(cdir), MESSAGE_FILE, "/" + message, False))
    return tuple(entries)


def _entry(
    pod_dir: PodDir,
    volume: VolumeConfig,
    sub_path: str,
    target: str,
    readonly: bool,
    prefixes: Sequence[str] = (),
) -> MountEntry | None:
    if volume.kind == "hostPath":
        base, rest = host_path_base(str(volume.source.get("path", "")), prefixes)
        return (base, "/".join(p for p in (rest, sub_path) if p), target, readonly)
    base = str(pod_dir.volume(volume.name).absolute())
    if volume.kind == "emptyDir":
        return (base, sub_path, target, readonly)
    if volume.kind in KUBELET_MADE:
        # Root's directories, links made by vkpy: following them is safe.
        return (os.path.join(base, sub_path) if sub_path else base, "", target, True)
    return None


def host_path_base(path: str, prefixes: Sequence[str]) -> tuple[str, str]:
    """(base, relative) of a hostPath: `base` the allowed prefix it is under (as the
    admin wrote it: followed), `relative` the rest, which a pod writing the prefix
    could have changed since the pod was admitted: walked without following links
    (podmounts.py), so a link planted there can lead nowhere. A path under no prefix
    (none configured) is walked from / without following any link."""
    lexical = os.path.normpath("/" + path.lstrip("/"))
    for prefix in sorted(prefixes, key=len, reverse=True):
        for base in (os.path.normpath(prefix), os.path.realpath(prefix)):
            if lexical == base or lexical.startswith(base.rstrip("/") + "/"):
                return os.path.realpath(base), lexical[len(base) :].strip("/")
    return "/", lexical.lstrip("/")


def memory_size(volume: VolumeConfig) -> int | None:
    """The tmpfs size of a `medium: Memory` emptyDir (None: the kernel's default)."""
    raw = volume.source.get("sizeLimit")
    if raw in (None, ""):
        return None
    try:
        return max(int(parse_quantity(str(raw))), 4096)
    except QuantityError:
        return None


def mount_memory_volumes(pod_dir: PodDir, pod: PodConfig) -> None:
    """A tmpfs on the directory of each `medium: Memory` emptyDir (on the host, like
    the kubelet's), before the pod's holder copies the pod's directory."""
    for volume in pod.volumes:
        if volume.kind != "emptyDir" or volume.source.get("medium") != "Memory":
            continue
        path = pod_dir.volume(volume.name)
        pod_dir.volumes.mkdir(mode=0o711, exist_ok=True)
        path.mkdir(mode=0o777, exist_ok=True)
        if os.path.ismount(path):
            continue
        size = memory_size(volume)
        options = "mode=777" + (f",size={size}" if size is not None else "")
        flags = mountcalls.MS_NOSUID | mountcalls.MS_NODEV
        mountcalls.mount("tmpfs", str(path), "tmpfs", flags, options)


def unmount_volumes(pod_dir: Path) -> None:
    """Detach every mount below the pod's directory (its memory emptyDirs)."""
    prefix = str(pod_dir.resolve()).rstrip("/") + "/"  # as the mount table names it
    targets = [target for target in mountcalls.mount_points() if target.startswith(prefix)]
    for target in sorted(targets, key=len, reverse=True):
        with contextlib.suppress(OSError):
            mountcalls.umount(target)
