"""Building the `PodConfig` a backend runs from a pod object.

This is where the kubelet's reading of a pod spec happens once for every backend:
each container's environment is resolved (ConfigMaps and Secrets read from the API
server), `$(VAR)` references in command and args are expanded, and volumes are
resolved into files (vkpy.node.podspec.volumes: configMap, secret, downwardAPI, projected with
service account tokens). A missing required reference raises `ConfigError`, and so
does `runAsNonRoot` with `runAsUser: 0` (or with no `runAsUser` on an image whose
user is root), as the kubelet refuses it before any start.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence

from vkpy.core.clock import SYSTEM_CLOCK, Clock
from vkpy.core.objects import KubeObject, ephemeral_containers_of, meta, namespace_of, spec
from vkpy.kube.client import ApiError, KubeClient
from vkpy.node.podspec.env import ConfigError, ObjectSource, expand, resolve_env
from vkpy.node.podspec.pod_object import pod_ref
from vkpy.node.podspec.pull_secrets import pull_credentials
from vkpy.node.podspec.service_cache import ServiceCache
from vkpy.node.podspec.service_env import service_variables
from vkpy.node.podspec.volumes import (
    TokenGrant,
    VolumeSource,
    resolve_volumes,
    token_grant,
    token_request,
)
from vkpy.providers.base import ContainerConfig, PodConfig


class ApiObjectSource:
    """Reads ConfigMaps and Secrets straight from the API server, and asks it for
    service account tokens bound to pods (TokenRequest). A namespace's Services come
    from one watch of every Service (ServiceCache, as a kubelet's informer); `close`
    ends it."""

    def __init__(self, client: KubeClient, clock: Clock = SYSTEM_CLOCK) -> None:
        self._client = client
        self._services = ServiceCache(client, self._list_services, clock)

    def start(self) -> None:
        """Start the watch of Services (before the first pod needs it)."""
        self._services.start()

    async def close(self) -> None:
        await self._services.close()

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

    async def list_services(self, namespace: str) -> list[KubeObject]:
        return await self._services.services(namespace)

    async def _list_services(self, namespace: str) -> list[KubeObject]:
        listed = await self._get(f"/api/v1/namespaces/{namespace}/services")
        return list((listed or {}).get("items") or [])

    async def request_token(
        self,
        namespace: str,
        service_account: str,
        *,
        audience: str | None,
        expiration_seconds: int,
        pod_name: str,
        pod_uid: str,
    ) -> TokenGrant:
        path = f"/api/v1/namespaces/{namespace}/serviceaccounts/{service_account}/token"
        body = token_request(audience, expiration_seconds, pod_name, pod_uid)
        try:
            answer = await self._client.create(path, body)
        except ApiError as error:
            if error.retryable:
                raise
            raise ConfigError(
                f"failed to fetch token for service account {namespace}/{service_account}: "
                f"{error.message}"
            ) from error
        return token_grant(answer, expiration_seconds)


ImageUser = Callable[[str], int | None]
"""The uid an image runs as when the pod names none (None: not known)."""


def check_run_as_non_root(
    pod: KubeObject, container: KubeObject, image_user: ImageUser | None = None
) -> None:
    """The kubelet's non-root check: `runAsNonRoot` with `runAsUser: 0` (the
    container's settings over the pod's), or without a `runAsUser` on an image whose
    user is root (when the backend knows it: `image_user`), is a
    CreateContainerConfigError, never run."""
    pod_security = spec(pod).get("securityContext") or {}
    mine = container.get("securityContext") or {}
    non_root = mine.get("runAsNonRoot", pod_security.get("runAsNonRoot"))
    user = mine.get("runAsUser", pod_security.get("runAsUser"))
    if not non_root:
        return
    m = meta(pod)
    where = f'(pod: "{m.get("name")}_{m.get("namespace")}({m.get("uid")})", '
    where += f"container: {container.get('name')})"
    if user is not None and int(user) == 0:
        raise ConfigError(f"container's runAsUser breaks non-root policy {where}")
    if user is None and image_user is not None and image_user(str(container.get("image"))) == 0:
        raise ConfigError(f"container has runAsNonRoot and image will run as root {where}")


async def _container(
    pod: KubeObject,
    container: KubeObject,
    source: ObjectSource,
    host_ip: str,
    allocatable: Mapping[str, str],
    links: Sequence[tuple[str, str]],
    image_user: ImageUser | None = None,
) -> ContainerConfig:
    check_run_as_non_root(pod, container, image_user)
    env = await resolve_env(pod, container, source, host_ip, allocatable, links)
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


async def service_links(pod: KubeObject, source: ObjectSource) -> list[tuple[str, str]]:
    """The variables for the Services of the pod's namespace (service_env.py), unless
    the pod turned `enableServiceLinks` off."""
    if spec(pod).get("enableServiceLinks") is False:
        return []
    return service_variables(await source.list_services(namespace_of(pod)))


async def ephemeral_container_configs(
    pod: KubeObject, source: ObjectSource, host_ip: str, allocatable: Mapping[str, str]
) -> tuple[ContainerConfig, ...]:
    """The pod's ephemeral containers (`kubectl debug`), resolved like any container;
    raises ConfigError for missing references."""
    links = await service_links(pod, source)
    return tuple(
        [
            await _container(pod, c, source, host_ip, allocatable, links)
            for c in ephemeral_containers_of(pod)
        ]
    )


async def build_pod_config(
    pod: KubeObject,
    source: VolumeSource,
    host_ip: str,
    allocatable: Mapping[str, str],
    with_volume_files: bool = True,
    with_pull_secrets: bool = False,
    image_user: ImageUser | None = None,
) -> PodConfig:
    """The backend's view of `pod`; raises ConfigError for missing references.

    `with_volume_files` is False for backends that do not read volume files
    (see `ReadsVolumeFiles`): their volumes are described, not fetched.
    `with_pull_secrets` reads the pod's imagePullSecrets (see `ReadsPullSecrets`).
    `image_user`: the backend's knowledge of images' users (see `KnowsImageUsers`)."""
    s = spec(pod)
    links = await service_links(pod, source)
    inits = [
        await _container(pod, c, source, host_ip, allocatable, links, image_user)
        for c in s.get("initContainers") or []
    ]
    containers = [
        await _container(pod, c, source, host_ip, allocatable, links, image_user)
        for c in s.get("containers") or []
    ]
    return PodConfig(
        ref=pod_ref(pod),
        pod=pod,
        init_containers=tuple(inits),
        containers=tuple(containers),
        volumes=await resolve_volumes(pod, source, host_ip, allocatable, with_volume_files),
        registry_credentials=await pull_credentials(pod, source) if with_pull_secrets else (),
    )


async def pod_volumes_config(
    pod: KubeObject, source: VolumeSource, host_ip: str, allocatable: Mapping[str, str]
) -> PodConfig:
    """The pod with only its volumes resolved again, for `RefreshesVolumes`: a refresh
    every `--volume-sync-period` reads the volumes' sources, not the containers'
    environment (its ConfigMaps, Secrets and the namespace's Services) as well."""
    return PodConfig(
        ref=pod_ref(pod),
        pod=pod,
        init_containers=(),
        containers=(),
        volumes=await resolve_volumes(pod, source, host_ip, allocatable, True),
    )
