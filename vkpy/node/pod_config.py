"""Building the `PodConfig` a backend runs from a pod object.

This is where the kubelet's reading of a pod spec happens once for every backend:
each container's environment is resolved (ConfigMaps and Secrets read from the API
server), `$(VAR)` references in command and args are expanded, and volumes are
listed. A missing required reference raises `ConfigError`.
"""

from __future__ import annotations

from collections.abc import Mapping

from vkpy.kube.client import ApiError, KubeClient
from vkpy.node.env import ObjectSource, expand, resolve_env
from vkpy.objects import KubeObject, meta, spec
from vkpy.providers.base import ContainerConfig, PodConfig, PodRef, VolumeConfig

VOLUME_KINDS = (
    "emptyDir",
    "configMap",
    "secret",
    "downwardAPI",
    "projected",
    "hostPath",
    "persistentVolumeClaim",
    "ephemeral",
    "csi",
    "nfs",
    "image",
)


class ApiObjectSource:
    """Reads ConfigMaps and Secrets straight from the API server."""

    def __init__(self, client: KubeClient) -> None:
        self._client = client

    async def _get(self, path: str) -> KubeObject | None:
        try:
            return await self._client.get(path)
        except ApiError as error:
            if error.not_found:
                return None
            raise

    async def get_config_map(self, namespace: str, name: str) -> KubeObject | None:
        return await self._get(f"/api/v1/namespaces/{namespace}/configmaps/{name}")

    async def get_secret(self, namespace: str, name: str) -> KubeObject | None:
        return await self._get(f"/api/v1/namespaces/{namespace}/secrets/{name}")


def pod_ref(pod: KubeObject) -> PodRef:
    m = meta(pod)
    return PodRef(str(m.get("namespace", "")), str(m.get("name", "")), str(m.get("uid", "")))


async def _container(
    pod: KubeObject,
    container: KubeObject,
    source: ObjectSource,
    host_ip: str,
    allocatable: Mapping[str, str],
) -> ContainerConfig:
    env = await resolve_env(pod, container, source, host_ip, allocatable)
    variables = dict(env)
    return ContainerConfig(
        name=str(container.get("name", "")),
        image=str(container.get("image", "")),
        command=tuple(expand(str(c), variables) for c in container.get("command") or []),
        args=tuple(expand(str(a), variables) for a in container.get("args") or []),
        env=tuple(env),
        working_dir=container.get("workingDir") or None,
        spec=container,
    )


def _volume(volume: KubeObject) -> VolumeConfig:
    name = str(volume.get("name", ""))
    for kind in VOLUME_KINDS:
        if kind in volume:
            return VolumeConfig(name=name, kind=kind, source=volume.get(kind) or {})
    other = next((k for k in volume if k != "name"), "unknown")
    return VolumeConfig(name=name, kind=other, source=volume.get(other) or {})


async def build_pod_config(
    pod: KubeObject, source: ObjectSource, host_ip: str, allocatable: Mapping[str, str]
) -> PodConfig:
    """The backend's view of `pod`; raises ConfigError for missing references."""
    s = spec(pod)
    inits = [
        await _container(pod, c, source, host_ip, allocatable)
        for c in s.get("initContainers") or []
    ]
    containers = [
        await _container(pod, c, source, host_ip, allocatable) for c in s.get("containers") or []
    ]
    return PodConfig(
        ref=pod_ref(pod),
        pod=pod,
        init_containers=tuple(inits),
        containers=tuple(containers),
        volumes=tuple(_volume(v) for v in s.get("volumes") or []),
    )
