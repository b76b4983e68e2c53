"""A pod as one ACI container group: the mapping, in one place.

One pod is one group: its containers share the group's network and volumes, its
init containers run first, its restart policy is the group's. Kubernetes fields map
where ACI has them; where Kubernetes has no field for an ACI feature (Spot, the
confidential SKU, a managed identity, a GPU SKU, a DNS label) a documented
`vkpy.io/aci-*` annotation asks for it. What ACI cannot do either raises
`InvalidInputError` (the pod fails with the reason, not retried) or, when dropping
it keeps the pod meaningful, becomes a note that the pod's status and a Warning
Event carry (see docs/aci-backend.md for the table).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from dataclasses import dataclass, field

from azure.mgmt.containerinstance import models as m

from vkpy.core.objects import KubeObject
from vkpy.providers.aci import naming, resources, volumes
from vkpy.providers.aci.config import AciConfig
from vkpy.providers.base import ContainerConfig, PodConfig
from vkpy.providers.errors import AdmissionError, InvalidInputError

ANNOTATION = "vkpy.io/aci-"
PRIORITY = ANNOTATION + "priority"
SKU = ANNOTATION + "sku"
CCE_POLICY = ANNOTATION + "cce-policy"
IDENTITY = ANNOTATION + "identity"
GPU_SKU = ANNOTATION + "gpu-sku"
DNS_LABEL = ANNOTATION + "dns-label"
IP = ANNOTATION + "ip"
SPEC_TAG = "vkpy.io/spec"
PRIVATE_PORT = 80
"""The port a private group of a pod without ports exposes (ACI needs one)."""


@dataclass(frozen=True)
class GroupSpec:
    name: str
    group: m.ContainerGroup
    notes: tuple[str, ...] = ()
    digest: str = ""
    restart_policy: str = "Always"
    init_names: tuple[str, ...] = ()
    names: tuple[str, ...] = field(default=())


def _annotations(pod: KubeObject) -> Mapping[str, str]:
    return (pod.get("metadata") or {}).get("annotations") or {}


def _secret_env_names(container: KubeObject) -> tuple[set[str], bool]:
    """Names whose values come from Secrets, and whether envFrom reads a Secret."""
    names = {
        str(e.get("name"))
        for e in container.get("env") or []
        if ((e.get("valueFrom") or {}).get("secretKeyRef"))
    }
    from_secret = any(s.get("secretRef") for s in container.get("envFrom") or [])
    return names, from_secret


def _env(c: ContainerConfig) -> list[m.EnvironmentVariable]:
    secret, from_secret = _secret_env_names(c.spec)
    explicit = {str(e.get("name")) for e in c.spec.get("env") or []}
    out = []
    for name, value in c.env:
        secure = name in secret or (from_secret and name not in explicit)
        out.append(
            m.EnvironmentVariable(name=name, secure_value=value)
            if secure
            else m.EnvironmentVariable(name=name, value=value)
        )
    return out


def _command(c: ContainerConfig) -> list[str] | None:
    if c.command:
        return list(c.argv)
    if c.args:
        raise InvalidInputError(
            f"container {c.name}: ACI cannot pass args without a command (it has no field "
            "for them); set command to the image's entrypoint followed by the args",
            reason="UnsupportedSpec",
        )
    return None


def _port_number(container: KubeObject, port: object) -> int:
    if isinstance(port, int):
        return port
    for p in container.get("ports") or []:
        if p.get("name") == port:
            return int(p["containerPort"])
    if str(port).isdigit():
        return int(str(port))
    raise InvalidInputError(f"probe port {port!r} names no port of the container")


def _probe(c: ContainerConfig, kind: str, notes: list[str]) -> m.ContainerProbe | None:
    probe = c.spec.get(kind)
    if not probe:
        return None
    common = {
        "initial_delay_seconds": probe.get("initialDelaySeconds"),
        "period_seconds": probe.get("periodSeconds"),
        "failure_threshold": probe.get("failureThreshold"),
        "success_threshold": probe.get("successThreshold"),
        "timeout_seconds": probe.get("timeoutSeconds"),
    }
    if probe.get("exec"):
        return m.ContainerProbe(
            exec_property=m.ContainerExec(command=list(probe["exec"].get("command") or [])),
            **common,
        )
    if probe.get("httpGet"):
        get = probe["httpGet"]
        return m.ContainerProbe(
            http_get=m.ContainerHttpGet(
                path=get.get("path"),
                port=_port_number(c.spec, get.get("port")),
                scheme=str(get.get("scheme") or "HTTP").lower(),
                http_headers=[
                    m.HttpHeader(name=h.get("name"), value=h.get("value"))
                    for h in get.get("httpHeaders") or []
                ]
                or None,
            ),
            **common,
        )
    notes.append(f"container {c.name}: ACI has no TCP or gRPC probes; the {kind} is not run")
    return None


def _ports(c: ContainerConfig) -> list[m.ContainerPort]:
    return [
        m.ContainerPort(port=int(p["containerPort"]), protocol=str(p.get("protocol") or "TCP"))
        for p in c.spec.get("ports") or []
    ]


def _mounts(c: ContainerConfig) -> list[m.VolumeMount] | None:
    mounts = [
        m.VolumeMount(
            name=str(v.get("name")),
            mount_path=str(v.get("mountPath")),
            read_only=bool(v.get("readOnly")) or None,
        )
        for v in c.spec.get("volumeMounts") or []
    ]
    for v in c.spec.get("volumeMounts") or []:
        if v.get("subPath") or v.get("subPathExpr"):
            raise InvalidInputError(
                f"container {c.name}: ACI cannot mount a subPath of a volume",
                reason="UnsupportedVolume",
            )
    return mounts or None


def _container(c: ContainerConfig, sku: str | None, notes: list[str]) -> tuple[m.Container, int]:
    sizes, size_notes = resources.size(c.spec, c.name)
    notes.extend(size_notes)
    gpu = None
    if sizes.gpu:
        gpu = m.GpuResource(count=sizes.gpu, sku=resources.gpu_sku(sizes.gpu, sku, c.name))
    limits = None
    if sizes.cpu_limit is not None or sizes.memory_gb_limit is not None:
        limits = m.ResourceLimits(cpu=sizes.cpu_limit, memory_in_gb=sizes.memory_gb_limit, gpu=gpu)
    if c.working_dir:
        notes.append(f"container {c.name}: ACI has no working directory setting; it is ignored")
    container = m.Container(
        name=c.name,
        image=c.image,
        command=_command(c),
        ports=_ports(c) or None,
        environment_variables=_env(c) or None,
        resources=m.ResourceRequirements(
            requests=m.ResourceRequests(cpu=sizes.cpu, memory_in_gb=sizes.memory_gb, gpu=gpu),
            limits=limits,
        ),
        volume_mounts=_mounts(c),
        liveness_probe=_probe(c, "livenessProbe", notes),
        readiness_probe=_probe(c, "readinessProbe", notes),
    )
    if c.spec.get("startupProbe"):
        notes.append(f"container {c.name}: ACI has no startup probes; it is not run")
    return container, sizes.gpu


def _network(
    pod: PodConfig, config: AciConfig, containers: list[m.Container], spot: bool
) -> tuple[m.IpAddress | None, list[m.ContainerGroupSubnetId] | None]:
    annotations = _annotations(pod.pod)
    ports = [m.Port(port=p.port, protocol=p.protocol) for c in containers for p in c.ports or []]
    wanted = annotations.get(IP, "private" if config.network.subnet_ids else "public")
    if wanted not in ("public", "private", "none"):
        raise InvalidInputError(f"{IP} must be public, private or none", reason="InvalidSpec")
    if wanted == "private":
        if not config.network.subnet_ids:
            raise InvalidInputError(
                "a private IP needs network.subnet_ids in the node's config", reason="InvalidSpec"
            )
        subnets = [m.ContainerGroupSubnetId(id=s) for s in config.network.subnet_ids]
        if not ports:
            # ACI's private IP needs a port, exposed by a container: the first container
            # gets PRIVATE_PORT (as `az container create --vnet` does without --ports)
            containers[0].ports = [m.ContainerPort(port=PRIVATE_PORT)]
            ports = [m.Port(port=PRIVATE_PORT)]
        return m.IpAddress(ports=ports, type="Private"), subnets
    if wanted == "none" or not ports or spot:
        return None, None
    label = annotations.get(DNS_LABEL)
    if label is None and config.network.dns_label_prefix:
        label = f"{config.network.dns_label_prefix}-{pod.ref.name}"[:63].rstrip("-")
    return m.IpAddress(ports=ports, type="Public", dns_name_label=label), None


def _dns(pod: KubeObject, config: AciConfig) -> m.DnsConfiguration | None:
    dns = (pod.get("spec") or {}).get("dnsConfig") or {}
    servers = list(dns.get("nameservers") or config.network.dns_servers)
    if not servers:
        return None
    search = list(dns.get("searches") or config.network.dns_search_domains)
    options = " ".join(
        f"{o['name']}:{o['value']}" if o.get("value") else str(o.get("name"))
        for o in dns.get("options") or []
    )
    return m.DnsConfiguration(
        name_servers=servers, search_domains=" ".join(search) or None, options=options or None
    )


def _identity(annotations: Mapping[str, str]) -> m.ContainerGroupIdentity | None:
    value = annotations.get(IDENTITY)
    if not value:
        return None
    if value == "SystemAssigned":
        return m.ContainerGroupIdentity(type="SystemAssigned")
    ids = [v.strip() for v in value.split(",") if v.strip()]
    return m.ContainerGroupIdentity(
        type="UserAssigned",
        user_assigned_identities={i: m.UserAssignedIdentities() for i in ids},
    )


def _check_os(pod: KubeObject, config: AciConfig) -> None:
    selector = (pod.get("spec") or {}).get("nodeSelector") or {}
    wanted = selector.get("kubernetes.io/os")
    if wanted and wanted.lower() != config.os_type.lower():  # the kubelet's admission
        raise AdmissionError(
            f"the pod asks for {wanted} and this node runs {config.os_type} groups",
            reason="NodeAffinity",
        )


def build(pod: PodConfig, config: AciConfig, node: str) -> GroupSpec:
    """The group for `pod`; InvalidInputError when ACI cannot run it."""
    annotations = _annotations(pod.pod)
    _check_os(pod.pod, config)
    notes: list[str] = []
    sku = annotations.get(GPU_SKU) or config.gpu_sku
    containers: list[m.Container] = []
    gpus = 0
    for c in pod.containers:
        container, gpu = _container(c, sku, notes)
        containers.append(container)
        gpus += gpu
    inits = [
        m.InitContainerDefinition(
            name=c.name,
            image=c.image,
            command=_command(c),
            environment_variables=_env(c) or None,
            volume_mounts=_mounts(c),
        )
        for c in pod.init_containers
    ]
    priority = annotations.get(PRIORITY, "Spot" if config.spot else "Regular")
    if priority not in ("Regular", "Spot"):
        raise InvalidInputError(f"{PRIORITY} must be Regular or Spot", reason="InvalidSpec")
    group_sku = annotations.get(SKU, "Standard")
    if group_sku not in ("Standard", "Dedicated", "Confidential"):
        raise InvalidInputError(
            f"{SKU} must be Standard, Dedicated or Confidential", reason="InvalidSpec"
        )
    ip, subnets = _network(pod, config, containers, priority == "Spot")
    group_volumes, volume_notes = volumes.build(pod, config)
    notes.extend(volume_notes)
    labels = (pod.pod.get("metadata") or {}).get("labels") or {}
    tags = naming.pod_tags(node, pod.ref, labels)
    group = m.ContainerGroup(
        location=config.region,
        tags=tags,
        os_type=config.os_type,
        restart_policy=pod.restart_policy,
        containers=containers,
        init_containers=inits or None,
        volumes=group_volumes or None,
        ip_address=ip,
        subnet_ids=subnets,
        dns_config=_dns(pod.pod, config),
        sku=group_sku,
        priority=priority,
        identity=_identity(annotations),
        image_registry_credentials=[
            m.ImageRegistryCredential(server=r.server, username=r.username, password=r.password)
            for r in pod.registry_credentials
        ]
        or None,
    )
    if group_sku == "Confidential":
        group.confidential_compute_properties = m.ConfidentialComputeProperties(
            cce_policy=annotations.get(CCE_POLICY)
        )
    if config.log_analytics_workspace:
        group.diagnostics = m.ContainerGroupDiagnostics(
            log_analytics=m.LogAnalytics(
                workspace_id=config.log_analytics_workspace,
                workspace_key=config.log_analytics_key or "",
            )
        )
    digest = hashlib.sha256(
        json.dumps(group.serialize(), sort_keys=True, default=str).encode()
    ).hexdigest()[:16]
    group.tags = {**tags, SPEC_TAG: digest}
    return GroupSpec(
        name=naming.group_name(pod.ref),
        group=group,
        notes=tuple(notes),
        digest=digest,
        restart_policy=pod.restart_policy,
        init_names=tuple(c.name for c in pod.init_containers),
        names=tuple(c.name for c in pod.containers),
    )
