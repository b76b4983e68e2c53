"""/etc/hosts, /etc/hostname and /etc/resolv.conf of a `runtime: oci` pod, as the
kubelet and its container runtime manage them.

An image's root has its own (or no) /etc/hosts and /etc/resolv.conf, which know
nothing of the pod: the kubelet writes the pod's hosts file (localhost, the pod's IP
with its hostname and subdomain FQDN, hostAliases: sandbox.hosts_file, shared with the
`host` runtime) and the runtime writes its hostname and resolv.conf, once per pod, in
the pod's directory; each container gets them bind-mounted at their paths unless it
mounts something there itself. As with the kubelet and containerd, they are writable
by root in the pod (owned by the pod's mapped root; resolv.conf and hostname
read-only under readOnlyRootFilesystem), and written once: what the pod changes in
them stays across its containers' restarts.

resolv.conf follows `dnsPolicy`: `None` is `dnsConfig` alone; `Default` is the node's
resolv.conf; `ClusterFirst` (and `ClusterFirstWithHostNet`) fall back to `Default`, as
the kubelet does when it has no cluster DNS address (vkpy's nodes have none), with
its Warning Event `MissingClusterDNS`; then
`dnsConfig` is appended (nameservers and searches, duplicates dropped; options by
name, the pod's win), within the kubelet's limits (3 nameservers, 32 search domains).
The node's resolv.conf is /etc/resolv.conf, or systemd-resolved's upstream file when
that one only names its loopback stub (as kubeadm sets the kubelet's --resolv-conf):
a pod's own network cannot reach the host's loopback.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from vkpy.core.objects import KubeObject
from vkpy.oci.runtime.spec import BindMount
from vkpy.providers.base import ContainerConfig, PodConfig
from vkpy.providers.process import namespaces
from vkpy.providers.process.layout import PodDir
from vkpy.providers.process.sandbox import HOSTNAME, HOSTS, host_network_hosts_file, hosts_file

RESOLV = "etc-resolv.conf"
NODE_RESOLV = Path("/etc/resolv.conf")
RESOLVED_UPSTREAM = Path("/run/systemd/resolve/resolv.conf")
NODE_HOSTS = Path("/etc/hosts")
MAX_NAMESERVERS = 3
MAX_SEARCHES = 32
_WRITING = threading.Lock()


@dataclass(frozen=True)
class DnsConfig:
    """A resolv.conf's content: nameservers, search domains and options."""

    nameservers: Sequence[str] = ()
    searches: Sequence[str] = ()
    options: Sequence[str] = field(default_factory=tuple)

    def text(self) -> str:
        """As containerd writes it: search, then nameservers, then options."""
        lines = []
        if self.searches:
            lines.append("search " + " ".join(self.searches))
        lines += [f"nameserver {server}" for server in self.nameservers]
        if self.options:
            lines.append("options " + " ".join(self.options))
        return "".join(f"{line}\n" for line in lines)


def parse_resolv_conf(text: str) -> DnsConfig:
    """The nameservers, search domains and options of a resolv.conf (the last
    `search` line wins, as in the resolver)."""
    servers: list[str] = []
    searches: list[str] = []
    options: list[str] = []
    for raw in text.splitlines():
        words = raw.split("#", 1)[0].split(";", 1)[0].split()
        if not words:
            continue
        if words[0] == "nameserver" and len(words) > 1:
            servers.append(words[1])
        elif words[0] in ("search", "domain"):
            searches = words[1:]
        elif words[0] == "options":
            options += words[1:]
    return DnsConfig(servers, searches, options)


def _unique(values: Sequence[str]) -> list[str]:
    return list(dict.fromkeys(values))


def _merge_options(base: Sequence[str], extra: Sequence[Mapping[str, Any]]) -> list[str]:
    """Options by name (`ndots:5` is ndots), the pod's replacing the node's."""
    merged: dict[str, str] = {option.split(":", 1)[0]: option for option in base}
    for option in extra:
        name = str(option.get("name") or "")
        if not name:
            continue
        value = option.get("value")
        merged[name] = name if value is None else f"{name}:{value}"
    return list(merged.values())


def pod_dns(spec: KubeObject, node: DnsConfig) -> DnsConfig:
    """The pod's resolv.conf content from its dnsPolicy and dnsConfig (see the module
    docstring) and the node's resolv.conf."""
    policy = str(spec.get("dnsPolicy") or "ClusterFirst")
    base = DnsConfig() if policy == "None" else node
    extra: KubeObject = spec.get("dnsConfig") or {}
    servers = _unique([*base.nameservers, *(str(s) for s in extra.get("nameservers") or [])])
    searches = _unique([*base.searches, *(str(s) for s in extra.get("searches") or [])])
    options = _merge_options(base.options, extra.get("options") or [])
    return DnsConfig(servers[:MAX_NAMESERVERS], searches[:MAX_SEARCHES], options)


def node_resolv_conf(path: Path = NODE_RESOLV, upstream: Path = RESOLVED_UPSTREAM) -> DnsConfig:
    """The node's resolv.conf (see the module docstring); empty if there is none."""
    try:
        found = parse_resolv_conf(path.read_text())
    except OSError:
        return DnsConfig()
    stub = found.nameservers and all(s.startswith("127.") for s in found.nameservers)
    if stub and upstream.is_file():
        return parse_resolv_conf(upstream.read_text())
    return found


def missing_cluster_dns(pod: PodConfig) -> str | None:
    """The kubelet's Warning `MissingClusterDNS` message when the pod's dnsPolicy asks
    for the cluster's DNS, which this node has none of (None: it does not ask)."""
    spec: KubeObject = pod.pod.get("spec") or {}
    policy = str(spec.get("dnsPolicy") or "ClusterFirst")
    host_network = bool(spec.get("hostNetwork"))
    if not (policy == "ClusterFirstWithHostNet" or (policy == "ClusterFirst" and not host_network)):
        return None
    return (
        f'pod: "{pod.ref.name}_{pod.ref.namespace}({pod.ref.uid})". kubelet does not have '
        'ClusterDNS IP configured and cannot create Pod using "ClusterFirst" policy. '
        'Falling back to "Default" policy.'
    )


def write_files(pod: PodConfig, pod_dir: PodDir, ip: str, service_host: str, owner: int) -> bool:
    """The pod's hosts, hostname and resolv.conf in its directory, once (a file
    already there is the pod's, possibly changed by it), owned by `owner` (the pod's
    mapped root). True when resolv.conf was written now (the pod's first container)."""
    if all((pod_dir.path / name).exists() for name in (HOSTS, HOSTNAME, RESOLV)):
        return False  # a later container or restart: nothing to read or write again
    spec: KubeObject = pod.pod.get("spec") or {}
    if spec.get("hostNetwork"):
        try:
            node_hosts = NODE_HOSTS.read_text()
        except OSError:
            node_hosts = ""
        hosts = host_network_hosts_file(pod, node_hosts)
    else:
        hosts = hosts_file(pod, ip, service_host or None)
    host = namespaces.hostname(spec, pod.ref.name, pod.ref.namespace)
    contents = {
        HOSTS: hosts,
        HOSTNAME: f"{host}\n",
        RESOLV: pod_dns(spec, node_resolv_conf()).text(),
    }
    with _WRITING:  # the pod's containers start together: one writes, the others see it
        return _write_once(pod_dir, contents, owner)


def _write_once(pod_dir: PodDir, contents: Mapping[str, str], owner: int) -> bool:
    written = False
    for name, text in contents.items():
        path = pod_dir.path / name
        if path.exists() or path.is_symlink():
            continue
        written = written or name == RESOLV
        temporary = pod_dir.path / f".{name}.tmp"
        fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o644)
        try:
            os.write(fd, text.encode())
            os.fchown(fd, owner, owner)
            os.fchmod(fd, 0o644)
        finally:
            os.close(fd)
        os.replace(temporary, path)
    return written


def mounts(
    pod: PodConfig, pod_dir: PodDir, config: ContainerConfig, read_only_root: bool
) -> tuple[BindMount, ...]:
    """The container's binds of the pod's files (write_files made them), but for a
    path the container mounts something at itself. A hostNetwork pod keeps the
    node's hostname (no file of its own, as its UTS namespace is the node's)."""
    taken = {
        os.path.normpath(str(m.get("mountPath") or ""))
        for m in config.spec.get("volumeMounts") or []
    }
    host_network = bool((pod.pod.get("spec") or {}).get("hostNetwork"))
    wanted = [(HOSTS, "/etc/hosts", False), (RESOLV, "/etc/resolv.conf", read_only_root)]
    if not host_network:
        wanted.append((HOSTNAME, "/etc/hostname", read_only_root))
    return tuple(
        BindMount(str((pod_dir.path / name).absolute()), target, read_only)
        for name, target, read_only in wanted
        if target not in taken
    )
