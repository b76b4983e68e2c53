"""ACI's documented rules for a container group, checked the way the service refuses.

A client that only ever talks to a lenient fake learns nothing about the real limits.
These checks follow ACI's documentation (resource limits per region and SKU, naming
rules, GPU SKUs and counts, what Spot, confidential and Windows groups may not
have); each failure is an `ArmError` with a code and a message in the service's
words, answered as HTTP 400 in ARM's error shape.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

from azure.mgmt.containerinstance import models


@dataclass
class ArmError(Exception):
    """An error answer in ARM's shape: {"error": {"code", "message"}}."""

    status: int
    code: str
    message: str

    def body(self) -> dict[str, Any]:
        error = models.CloudErrorBody(code=self.code, message=self.message)
        return {"error": error.serialize(keep_readonly=True)}


_NAME = re.compile(r"^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?$")
GPU_SKUS = {"K80": (1, 2, 4), "P100": (1, 2, 4), "V100": (1, 2, 4)}
"""GPU SKUs and the counts one container may ask for."""
MAX_CPU = Decimal(4)
MAX_MEMORY_GB = Decimal(16)
MAX_GPU_CPU = Decimal(24)
MAX_GPU_MEMORY_GB = Decimal(448)
MAX_CONTAINERS = 60
MAX_VOLUMES = 20


def missing_required(model: Any, path: str = "") -> list[str]:
    """Paths of required properties left out, per the SDK's generated `_validation`
    (which the SDK itself does not check)."""
    out: list[str] = []
    rules: dict[str, dict[str, Any]] = getattr(model, "_validation", {}) or {}
    attributes: dict[str, dict[str, Any]] = getattr(model, "_attribute_map", {}) or {}
    for attr, info in attributes.items():
        value = getattr(model, attr, None)
        wire = info.get("key", attr).replace("\\.", ".")
        where = f"{path}.{wire}" if path else wire
        if value is None:
            if rules.get(attr, {}).get("required"):
                out.append(where)
            continue
        items = value if isinstance(value, list) else [value]
        for index, item in enumerate(items):
            if hasattr(item, "_attribute_map"):
                suffix = f"[{index}]" if isinstance(value, list) else ""
                out.extend(missing_required(item, where + suffix))
    return out


def bad(code: str, message: str) -> ArmError:
    return ArmError(400, code, message)


def check_name(kind: str, name: str | None) -> None:
    if not name or not _NAME.match(name) or "--" in name:
        raise bad(
            f"Invalid{kind}Name",
            f"The {kind[0].lower() + kind[1:]} name '{name}' is invalid. The name must contain "
            "no more than 63 characters and only lower case alphanumeric characters or '-', "
            "and must not start or end with '-' or contain '--'.",
        )


def _dec(value: float | None) -> Decimal:
    return Decimal(str(value or 0))


def check_group(group: Any, group_name: str) -> None:
    """Raise ArmError where ACI would refuse `group` (a ContainerGroup model)."""
    check_name("ContainerGroup", group_name)
    if not group.location:
        raise bad("LocationRequired", "The location property is required for this definition.")
    containers = group.containers or []
    if not containers:
        raise bad("NoContainersInContainerGroup", "The container group must have containers.")
    if len(containers) + len(group.init_containers or []) > MAX_CONTAINERS:
        raise bad("TooManyContainers", f"A container group has at most {MAX_CONTAINERS}.")
    names = [c.name for c in containers] + [c.name for c in group.init_containers or []]
    for name in names:
        check_name("Container", name)
    if len(set(names)) != len(names):
        raise bad("DuplicateContainerName", "Container names must be unique in a group.")
    windows = (group.os_type or "Linux") == "Windows"
    spot = group.priority == "Spot"
    confidential = group.sku == "Confidential"
    volumes = {v.name: v for v in group.volumes or []}
    if len(volumes) > MAX_VOLUMES:
        raise bad("TooManyVolumes", f"A container group has at most {MAX_VOLUMES} volumes.")
    for volume in volumes.values():
        kinds = [k for k in ("azure_file", "empty_dir", "secret", "git_repo") if getattr(volume, k)]
        if volume.empty_dir == {}:
            kinds = [*kinds, "empty_dir"] if "empty_dir" not in kinds else kinds
        if len(kinds) != 1:
            raise bad("InvalidVolume", f"Volume '{volume.name}' must have exactly one volume type.")
        share = volume.azure_file
        if share is not None and not (share.share_name and share.storage_account_name):
            raise bad(
                "InvalidAzureFileVolume",
                f"Volume '{volume.name}': shareName and storageAccountName are required.",
            )
    total_cpu, total_memory, gpu_total = Decimal(0), Decimal(0), 0
    container_ports: set[int] = set()
    for container in containers:
        requests = container.resources.requests
        cpu, memory = _dec(requests.cpu), _dec(requests.memory_in_gb)
        if cpu <= 0 or cpu != cpu.quantize(Decimal("0.01")):
            raise bad(
                "InvalidContainerResourceRequests",
                f"The CPU request of container '{container.name}' must be a positive "
                "multiple of 0.01.",
            )
        if memory <= 0 or memory != memory.quantize(Decimal("0.1")):
            raise bad(
                "InvalidContainerResourceRequests",
                f"The memory request of container '{container.name}' must be a positive "
                "multiple of 0.1 GB.",
            )
        limits = container.resources.limits
        if limits is not None and (
            (_dec(limits.cpu) and _dec(limits.cpu) < cpu)
            or (_dec(limits.memory_in_gb) and _dec(limits.memory_in_gb) < memory)
        ):
            raise bad(
                "InvalidContainerResourceLimits",
                f"The resource limits of container '{container.name}' must not be below "
                "its requests.",
            )
        gpu = requests.gpu
        if gpu is not None:
            counts = GPU_SKUS.get(str(gpu.sku))
            if counts is None:
                raise bad(
                    "InvalidGpuSku",
                    f"The GPU SKU '{gpu.sku}' is not supported; use one of "
                    f"{', '.join(sorted(GPU_SKUS))}.",
                )
            if gpu.count not in counts:
                raise bad(
                    "InvalidGpuCount",
                    f"The GPU count {gpu.count} of SKU {gpu.sku} is not supported; "
                    f"use {', '.join(map(str, counts))}.",
                )
            gpu_total += gpu.count
        total_cpu += cpu
        total_memory += memory
        for port in container.ports or []:
            if not 1 <= port.port <= 65535:
                raise bad("InvalidContainerPort", f"Port {port.port} is out of range.")
            container_ports.add(port.port)
        for mount in container.volume_mounts or []:
            if mount.name not in volumes:
                raise bad(
                    "VolumeMountNotFound",
                    f"The volume mount '{mount.name}' of container '{container.name}' "
                    "names no volume of the group.",
                )
    cpu_cap, memory_cap = (
        (MAX_GPU_CPU, MAX_GPU_MEMORY_GB) if gpu_total else (MAX_CPU, MAX_MEMORY_GB)
    )
    if total_cpu > cpu_cap or total_memory > memory_cap:
        raise bad(
            "ResourceRequestsNotSupported",
            f"The requested resource with '{total_cpu}' CPU and '{total_memory}' GB memory "
            f"is not supported in location '{group.location}'. The maximum allowed resource "
            f"is '{cpu_cap}' CPU and '{memory_cap}' GB memory.",
        )
    for init in group.init_containers or []:
        for mount in init.volume_mounts or []:
            if mount.name not in volumes:
                raise bad(
                    "VolumeMountNotFound",
                    f"The volume mount '{mount.name}' of init container '{init.name}' "
                    "names no volume of the group.",
                )
    ip = group.ip_address
    if ip is not None:
        for port in ip.ports or []:
            if port.port not in container_ports:
                raise bad(
                    "InvalidIpAddressPorts",
                    f"The port {port.port} of the IP address is not exposed by any container.",
                )
        if ip.type == "Private" and not group.subnet_ids:
            raise bad("PrivateIPAddressNotSupported", "A private IP address needs subnetIds.")
        if ip.dns_name_label and ip.type != "Public":
            raise bad("DnsNameLabelNotSupported", "A DNS name label needs a public IP address.")
    if windows:
        if group.init_containers:
            raise bad("InitContainersNotSupported", "Windows groups cannot have init containers.")
        if group.subnet_ids:
            raise bad("VnetNotSupported", "Windows groups cannot be deployed to a virtual network.")
        if gpu_total:
            raise bad("GpuNotSupported", "GPU resources are not supported for Windows groups.")
    if spot and (gpu_total or ip is not None or group.subnet_ids):
        raise bad(
            "SpotPriorityNotSupported",
            "Spot container groups cannot have GPU resources, an IP address or a virtual network.",
        )
    if confidential and (windows or gpu_total):
        raise bad(
            "ConfidentialSkuNotSupported",
            "The Confidential SKU supports Linux groups without GPU resources only.",
        )
    for credential in group.image_registry_credentials or []:
        if not credential.server or not (credential.password or credential.identity):
            raise bad(
                "InvalidImageRegistryCredential",
                "An image registry credential needs a server and a password or an identity.",
            )
