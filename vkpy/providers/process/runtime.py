"""What every pod of the backend shares, and how a container's context is built.

`Runtime` carries the node-wide pieces (settings, the containers' user, the memory
enforcement found at start, the probe and hook runner). `container_context` is the
one place that decides how a container's processes start: a minimal environment
(PATH, HOSTNAME, the kubelet's KUBERNETES_SERVICE_* variables when configured, then
the pod spec's resolved env, which wins) and the working directory inside the
container's root. The main process, probes, hooks and exec sessions all use it.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from vkpy.providers.base import ContainerConfig, EventCallback, PodConfig, PodEvent, PodRef
from vkpy.providers.process import idranges, namespaces, ocivolumes, sandbox
from vkpy.providers.process.actions import Actions
from vkpy.providers.process.addresses import AddressPool
from vkpy.providers.process.cgroups import CgroupParent
from vkpy.providers.process.config import ProcessConfig, RunAs
from vkpy.providers.process.filesystem import working_dir
from vkpy.providers.process.identity import IdPool, container_ids
from vkpy.providers.process.images import DEFAULT_PATH
from vkpy.providers.process.layout import PodDir
from vkpy.providers.process.ocipods import OciNode
from vkpy.providers.process.privileges import confinement
from vkpy.providers.process.records import MemoryMode, ProcessContext


def _no_events(ref: PodRef, event: PodEvent) -> None:
    pass


@dataclass(frozen=True)
class Runtime:
    config: ProcessConfig
    run_as: RunAs
    actions: Actions
    cgroup: CgroupParent | None
    memory_mode: MemoryMode
    pool: IdPool
    """Which pod has which ids (identity.py)."""
    report_event: EventCallback = _no_events
    """Where a pod's Events go (failed probes, kills): the kubelet side's callback."""
    addresses: AddressPool = field(default_factory=AddressPool)
    """Which pod has which address (`network: pod`, addresses.py)."""
    oci: OciNode | None = None
    """`runtime: oci`: runc, the image store and the pods' sandboxes (ocipods.py)."""

    def pod_ip(self, pod: PodRef) -> str:
        """The pod's address: its own (`network: pod`), else the node's."""
        held = self.addresses.address(pod.uid)
        return held.address if held is not None else self.config.internal_ip

    def volume_owner(self, pod: PodConfig) -> RunAs:
        """Who owns the pod's volumes: in `runtime: oci` the pod's root and fsGroup as
        host ids of its range (ocivolumes.py), else `owner`."""
        if self.oci is not None:
            ids = idranges.load(self.config.pods_path / pod.ref.uid)
            if ids is None:
                raise OSError(f"pod {pod.ref} has no id range")
            return ocivolumes.volume_owner(pod, ids)
        return self.owner(pod.ref)

    def owner(self, pod: PodRef) -> RunAs:
        """Who owns what the pod may write: its own identity, or the shared one."""
        identity = self.pool.identity(pod.uid)
        if identity is None or identity.own is None:
            return self.run_as
        return identity.owner


def service_env(host: str, port: int) -> list[tuple[str, str]]:
    """The variables the kubelet derives from the `kubernetes` Service."""
    url = f"tcp://{host}:{port}"
    prefix = f"KUBERNETES_PORT_{port}_TCP"
    return [
        ("KUBERNETES_SERVICE_HOST", host),
        ("KUBERNETES_SERVICE_PORT", str(port)),
        ("KUBERNETES_SERVICE_PORT_HTTPS", str(port)),
        ("KUBERNETES_PORT", url),
        (prefix, url),
        (f"{prefix}_PROTO", "tcp"),
        (f"{prefix}_PORT", str(port)),
        (f"{prefix}_ADDR", host),
    ]


def container_env(
    runtime: Runtime, pod: PodConfig, container: ContainerConfig, *, default_path: bool = True
) -> list[tuple[str, str]]:
    """The container's variables as the kubelet gives them: HOSTNAME, the `kubernetes`
    Service's, then the container's own, status.podIP the pod's own address once it
    has one; first a PATH (`default_path`) for host programs, which an image's ENV
    gives in `runtime: oci`."""
    spec = pod.pod.get("spec") or {}
    hostname = namespaces.hostname(spec, pod.ref.name, pod.ref.namespace)
    values: dict[str, str] = {"PATH": DEFAULT_PATH} if default_path else {}
    values["HOSTNAME"] = hostname
    if runtime.config.kubernetes_service_host:
        values.update(
            service_env(
                runtime.config.kubernetes_service_host, runtime.config.kubernetes_service_port
            )
        )
    own_ip = runtime.addresses.address(pod.ref.uid)
    for name, value in container.env:
        values.pop(name, None)
        values[name] = value
    if own_ip is not None:
        # The kubelet side resolved status.podIP before the pod had its address.
        for name in pod_ip_fields(container):
            values[name] = own_ip.address
    return list(values.items())


def pod_ip_fields(container: ContainerConfig) -> list[str]:
    """Names of the container's variables from the downward API's status.podIP(s)."""
    names = []
    for entry in container.spec.get("env") or []:
        ref = (entry.get("valueFrom") or {}).get("fieldRef") or {}
        if ref.get("fieldPath") in ("status.podIP", "status.podIPs"):
            names.append(str(entry.get("name")))
    return names


def container_context(
    runtime: Runtime, pod: PodConfig, pod_dir: PodDir, container: ContainerConfig
) -> ProcessContext:
    cwd = pod_dir.container(container.name).root / working_dir(container)
    identity = runtime.pool.identity(pod.ref.uid)
    if identity is None or identity.own is None:
        run_as = runtime.run_as
        uid, gid, groups = run_as.uid, run_as.gid, run_as.groups
    else:
        ids = container_ids(identity, pod, container)
        uid, gid, groups = ids.uid, ids.gid, ids.groups
    if uid == 0:
        raise ValueError("a container never runs as root")
    holder = namespaces.load(pod_dir.path)
    if holder is not None and not holder.alive():
        holder = None  # gone: the process keeps the host's namespaces
    filesystem = holder is not None and "mnt" in holder.kinds
    security = container.spec.get("securityContext") or {}
    confined = confinement(pod, container, runtime.config.allow)
    return ProcessContext(
        env=tuple(container_env(runtime, pod, container)),
        cwd=str(cwd),
        uid=uid,
        gid=gid,
        groups=groups,
        namespaces=holder.paths() if holder is not None else (),
        mounts=(
            sandbox.container_mounts(pod_dir, pod, container, runtime.config.host_path_prefixes)
            if filesystem
            else ()
        ),
        readonly_root=filesystem and bool(security.get("readOnlyRootFilesystem")),
        pid_namespace=(holder.pid_path() or "") if filesystem and holder is not None else "",
        capabilities=confined.capabilities,
        privileged=confined.privileged,
        seccomp=confined.seccomp,
    )
