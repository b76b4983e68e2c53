"""A pod as the backend was given it, kept on disk so a restarted vkpy can go on.

When vkpy restarts, the pod controller adopts what the backend lists and does not
create those pods again, so the backend must be able to restart their containers on
its own: it keeps the `PodConfig` (with resolved environment, which may hold
secrets, hence mode 0600) in `pod.json`. Volume files are not kept here: they are on
disk already, and renewed ones arrive through `refresh_volumes`.
"""

from __future__ import annotations

from typing import Any

from vkpy.providers.base import ContainerConfig, PodConfig, PodRef, VolumeConfig


def _container_dict(container: ContainerConfig) -> dict[str, Any]:
    return {
        "name": container.name,
        "image": container.image,
        "command": list(container.command),
        "args": list(container.args),
        "env": [list(pair) for pair in container.env],
        "working_dir": container.working_dir,
        "spec": container.spec,
    }


def _container(raw: dict[str, Any]) -> ContainerConfig:
    return ContainerConfig(
        name=str(raw["name"]),
        image=str(raw["image"]),
        command=tuple(raw["command"]),
        args=tuple(raw["args"]),
        env=tuple((str(k), str(v)) for k, v in raw["env"]),
        working_dir=raw.get("working_dir"),
        spec=raw.get("spec") or {},
    )


def pod_to_dict(pod: PodConfig) -> dict[str, Any]:
    return {
        "ref": {"namespace": pod.ref.namespace, "name": pod.ref.name, "uid": pod.ref.uid},
        "pod": pod.pod,
        "init_containers": [_container_dict(c) for c in pod.init_containers],
        "containers": [_container_dict(c) for c in pod.containers],
        "volumes": [{"name": v.name, "kind": v.kind, "source": v.source} for v in pod.volumes],
        "ephemeral_containers": [_container_dict(c) for c in pod.ephemeral_containers],
    }


def pod_from_dict(raw: dict[str, Any]) -> PodConfig:
    ref = raw["ref"]
    return PodConfig(
        ref=PodRef(str(ref["namespace"]), str(ref["name"]), str(ref["uid"])),
        pod=raw.get("pod") or {},
        init_containers=tuple(_container(c) for c in raw.get("init_containers") or []),
        containers=tuple(_container(c) for c in raw.get("containers") or []),
        volumes=tuple(
            VolumeConfig(name=str(v["name"]), kind=str(v["kind"]), source=v.get("source") or {})
            for v in raw.get("volumes") or []
        ),
        ephemeral_containers=tuple(_container(c) for c in raw.get("ephemeral_containers") or []),
    )
