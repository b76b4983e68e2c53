"""What ECS task definition a pod is: the pure mapping from `PodConfig` to API parameters.

Each container becomes a container definition: image, command as entryPoint and
args as command (the same split Docker makes), environment, working directory,
ports, CPU and memory, awslogs logging into the configured group with the family
as stream prefix, and the grace period as stopTimeout. App containers are
essential; init containers run first, one after the other, as non-essential
containers the app containers depend on with condition SUCCESS. The task's size is
the cheapest valid Fargate size that holds what the containers ask for, with a note
when that is more. emptyDir volumes become task volumes; other volumes, sidecar init
containers and SCTP ports cannot be represented and are refused with a message.
No I/O happens here, so every rule is unit-tested directly.
"""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from decimal import Decimal

from vkpy.core.quantity import QuantityError, parse_quantity
from vkpy.providers import owner_tags
from vkpy.providers.aws import naming, tags
from vkpy.providers.base import ContainerConfig, PodConfig
from vkpy.providers.errors import AdmissionError, InvalidInputError, UnsupportedError
from vkpy.providers.fargate import sizes
from vkpy.providers.fargate.config import FargateConfig

SPEC_TAG = owner_tags.PREFIX + "spec"
RESTART_POLICY_TAG = owner_tags.PREFIX + "restart-policy"
RESTARTS_TAG = owner_tags.PREFIX + "restarts"
NOTE_TAG = owner_tags.PREFIX + "note"
SERVICE_ACCOUNT_VOLUME = "kube-api-access-"
"""Name prefix of the token volume Kubernetes adds to pods; a task has no use for it."""
STOP_TIMEOUT_MIN = 2
STOP_TIMEOUT_MAX = 120
"""Fargate's range for a container's stopTimeout (s)."""


@dataclass(frozen=True)
class TaskDefinitionSpec:
    """A task definition as RegisterTaskDefinition wants it."""

    family: str
    params: Mapping[str, object] = field(repr=False)
    """RegisterTaskDefinition parameters without tags."""
    tags: Mapping[str, str]
    digest: str
    """A digest of `params`, kept in a tag, to reuse a registered definition."""
    cpu: int
    memory: int
    notes: tuple[str, ...] = ()

    def register_params(self) -> dict[str, object]:
        return {**self.params, "tags": tags.as_list(self.tags)}


def _quantity(container: ContainerConfig, kind: str, resource: str) -> Decimal | None:
    raw = ((container.spec.get("resources") or {}).get(kind) or {}).get(resource)
    if raw is None:
        return None
    try:
        return parse_quantity(raw)
    except QuantityError:
        raise InvalidInputError(
            f"container {container.name}: {resource} {kind} {raw!r} is not a quantity",
            reason="InvalidResources",
        ) from None


def _cpu_units(value: Decimal | None) -> int | None:
    return None if value is None else max(1, math.ceil(value * 1024))


def _mib(value: Decimal | None) -> int | None:
    return None if value is None else max(1, math.ceil(value / Decimal(2**20)))


@dataclass(frozen=True)
class _Resources:
    cpu_request: int | None
    cpu_limit: int | None
    memory_request: int | None
    memory_limit: int | None

    @property
    def cpu(self) -> int:
        return max(self.cpu_limit or 0, self.cpu_request or 0)

    @property
    def memory(self) -> int:
        return max(self.memory_limit or 0, self.memory_request or 0)


def _resources(container: ContainerConfig) -> _Resources:
    return _Resources(
        cpu_request=_cpu_units(_quantity(container, "requests", "cpu")),
        cpu_limit=_cpu_units(_quantity(container, "limits", "cpu")),
        memory_request=_mib(_quantity(container, "requests", "memory")),
        memory_limit=_mib(_quantity(container, "limits", "memory")),
    )


def _ports(container: ContainerConfig) -> list[dict[str, object]]:
    out: list[dict[str, object]] = []
    for port in container.spec.get("ports") or []:
        protocol = str(port.get("protocol") or "TCP").lower()
        if protocol not in ("tcp", "udp"):
            raise UnsupportedError(
                f"container {container.name}: {protocol.upper()} ports are not supported "
                "by Fargate",
                reason="UnsupportedPort",
            )
        out.append({"containerPort": int(port["containerPort"]), "protocol": protocol})
    return out


def _mounts(container: ContainerConfig, volumes: set[str]) -> list[dict[str, object]]:
    mounts: list[dict[str, object]] = []
    for mount in container.spec.get("volumeMounts") or []:
        name = str(mount.get("name", ""))
        if name.startswith(SERVICE_ACCOUNT_VOLUME):
            continue
        if name not in volumes:
            continue  # refused with the volume itself
        if mount.get("subPath") or mount.get("subPathExpr"):
            raise UnsupportedError(
                f"container {container.name}: subPath mounts are not supported by Fargate",
                reason="UnsupportedVolume",
            )
        mounts.append(
            {
                "sourceVolume": name,
                "containerPath": str(mount.get("mountPath", "")),
                "readOnly": bool(mount.get("readOnly", False)),
            }
        )
    return mounts


def _task_volumes(pod: PodConfig) -> list[dict[str, object]]:
    volumes: list[dict[str, object]] = []
    for volume in pod.volumes:
        if volume.name.startswith(SERVICE_ACCOUNT_VOLUME):
            continue
        if volume.kind != "emptyDir":
            raise UnsupportedError(
                f"volume {volume.name}: {volume.kind} volumes cannot be mapped to a Fargate "
                "task (only emptyDir)",
                reason="UnsupportedVolume",
            )
        volumes.append({"name": volume.name})
    return volumes


def _container_definition(
    container: ContainerConfig,
    *,
    essential: bool,
    depends_on: Sequence[str],
    log_options: Mapping[str, str],
    volume_names: set[str],
    stop_timeout: int,
    memory_share: int,
) -> dict[str, object]:
    resources = _resources(container)
    definition: dict[str, object] = {
        "name": container.name,
        "image": container.image,
        "essential": essential,
        "environment": [{"name": k, "value": v} for k, v in container.env],
        "portMappings": _ports(container),
        "mountPoints": _mounts(container, volume_names),
        "stopTimeout": stop_timeout,
        "logConfiguration": {"logDriver": "awslogs", "options": dict(log_options)},
    }
    if container.command:
        definition["entryPoint"] = list(container.command)
    if container.args:
        definition["command"] = list(container.args)
    if container.working_dir:
        definition["workingDirectory"] = container.working_dir
    if resources.cpu_request or resources.cpu_limit:
        definition["cpu"] = resources.cpu_request or resources.cpu_limit
    if resources.memory_limit:
        definition["memory"] = resources.memory_limit
    # A soft reservation for every container: what it asks for, else its share of the
    # task. It only guides placement inside the task and never limits the container.
    reservation = resources.memory_request or memory_share
    if resources.memory_limit:
        reservation = min(reservation, resources.memory_limit)
    definition["memoryReservation"] = reservation
    if depends_on:
        definition["dependsOn"] = [{"containerName": n, "condition": "SUCCESS"} for n in depends_on]
    return definition


def _stop_timeout(pod: PodConfig) -> int:
    grace = (pod.pod.get("spec") or {}).get("terminationGracePeriodSeconds")
    seconds = 30 if grace is None else int(grace)
    return min(STOP_TIMEOUT_MAX, max(STOP_TIMEOUT_MIN, seconds))


def _size(pod: PodConfig) -> tuple[int, int, str | None]:
    """Task cpu units and memory MiB, and a note when they exceed what was asked."""
    app = [_resources(c) for c in pod.containers]
    init = [_resources(c) for c in pod.init_containers]
    cpu = max(sum(r.cpu for r in app), max((r.cpu for r in init), default=0))
    memory = max(sum(r.memory for r in app), max((r.memory for r in init), default=0))
    size = sizes.fit(cpu, memory)
    if size is None:  # never fits: what a kubelet rejects at admission (OutOfcpu)
        raise AdmissionError(
            f"the pod asks for {cpu / 1024:g} vCPU and {memory} MiB; the largest Fargate task "
            f"has {sizes.MAX_CPU // 1024} vCPU and {sizes.MAX_MEMORY} MiB",
            reason="InvalidResources",
        )
    task_cpu, task_memory = size
    note = None
    if (cpu or memory) and (task_cpu, task_memory) != (cpu, memory):
        note = (
            f"resources {cpu / 1024:.2g} vCPU {memory} MiB rounded up to the Fargate size "
            f"{task_cpu / 1024:g} vCPU {task_memory} MiB"
        )
    return task_cpu, task_memory, note


def build(pod: PodConfig, config: FargateConfig, node: str, region: str) -> TaskDefinitionSpec:
    """The task definition for `pod`; InvalidInputError/UnsupportedError if there is none."""
    if not pod.containers:
        raise InvalidInputError("the pod has no containers", reason="InvalidPod")
    for init in pod.init_containers:
        if init.spec.get("restartPolicy") == "Always":
            raise UnsupportedError(
                f"init container {init.name}: sidecar containers (restartPolicy Always) are "
                "not supported by the fargate backend; make it a regular container",
                reason="UnsupportedSidecar",
            )
    family = naming.task_family(pod.ref)
    volumes = _task_volumes(pod)
    volume_names = {str(v["name"]) for v in volumes}
    task_cpu, task_memory, note = _size(pod)
    share = max(4, task_memory // (len(pod.containers) + len(pod.init_containers)))
    log_options = {
        "awslogs-group": config.log_group,
        "awslogs-region": region,
        "awslogs-stream-prefix": family,
    }
    stop_timeout = _stop_timeout(pod)
    definitions: list[dict[str, object]] = []
    previous: list[str] = []
    for init in pod.init_containers:
        definitions.append(
            _container_definition(
                init,
                essential=False,
                depends_on=previous[-1:],
                log_options=log_options,
                volume_names=volume_names,
                stop_timeout=stop_timeout,
                memory_share=share,
            )
        )
        previous.append(init.name)
    for container in pod.containers:
        definitions.append(
            _container_definition(
                container,
                essential=True,
                depends_on=previous[-1:],
                log_options=log_options,
                volume_names=volume_names,
                stop_timeout=stop_timeout,
                memory_share=share,
            )
        )
    params: dict[str, object] = {
        "family": family,
        "networkMode": "awsvpc",
        "requiresCompatibilities": ["FARGATE"],
        "cpu": str(task_cpu),
        "memory": str(task_memory),
        "containerDefinitions": definitions,
        "volumes": volumes,
    }
    if config.execution_role_arn:
        params["executionRoleArn"] = config.execution_role_arn
    if config.task_role_arn:
        params["taskRoleArn"] = config.task_role_arn
    digest = hashlib.sha256(json.dumps(params, sort_keys=True).encode()).hexdigest()[:32]
    notes = (note,) if note else ()
    extra = {
        SPEC_TAG: digest,
        RESTART_POLICY_TAG: pod.restart_policy,
    }
    if notes:
        extra[NOTE_TAG] = tags.note_value("; ".join(notes))
    labels = (pod.pod.get("metadata") or {}).get("labels") or {}
    return TaskDefinitionSpec(
        family=family,
        params=params,
        tags=tags.pod_tags(node, pod.ref, labels, extra),
        digest=digest,
        cpu=task_cpu,
        memory=task_memory,
        notes=notes,
    )
