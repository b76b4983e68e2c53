"""Volume contents resolved the way the kubelet does it, before a backend sees them.

A backend should not talk to the API server to fill a pod's volumes, so the kubelet
side reads what configMap, secret, downwardAPI and projected volumes hold (including
service account tokens from the TokenRequest API, bound to the pod) and hands the
backend plain files: `VolumeConfig.files`, with `items`, `defaultMode`/`mode` and
`optional` honoured and every path checked (relative, no `..`). Other kinds
(emptyDir, hostPath, PVCs, ...) are passed on with their spec for the backend to map
or refuse. A missing required object raises `ConfigError`, which the pod controller
reports as CreateContainerConfigError and retries, exactly like env references.

Tokens expire: `TokenTracker` wraps the object source and remembers when the tokens
it handed out should be renewed (the kubelet's rule: at 80% of their lifetime, or
after 24 h), so the pod controller knows when to resolve the volumes again. It also
resolves them again every `--volume-sync-period` (a changed or new ConfigMap or
Secret) and when the pod's labels or annotations change (downward API), keeping
tokens that are not due (`follows_sources`, `metadata_key`). Contents
are never logged and never put into an error message.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Protocol

from vkpy.core.objects import (
    KubeObject,
    containers_of,
    init_containers_of,
    meta,
    namespace_of,
    spec,
    volumes_of,
)
from vkpy.core.rfc3339 import parse_or_none
from vkpy.node.podspec.config_objects import ConfigError, Kind, ObjectSource, key_value, lookup
from vkpy.node.podspec.env import field_value, resource_value
from vkpy.providers.base import VolumeConfig, VolumeFile

DEFAULT_MODE = 0o644
DEFAULT_TOKEN_SECONDS = 3600
TOKEN_MAX_AGE = timedelta(hours=24)
"""The kubelet renews a token once it is this old, whatever its expiry."""
FILE_KINDS = frozenset({"configMap", "secret", "downwardAPI", "projected"})
OTHER_KINDS = (
    "emptyDir",
    "hostPath",
    "persistentVolumeClaim",
    "ephemeral",
    "csi",
    "nfs",
    "image",
    "iscsi",
    "gitRepo",
)


@dataclass(frozen=True)
class TokenGrant:
    """A service account token from the TokenRequest API."""

    token: str = field(repr=False)
    expires_at: datetime
    lifetime_seconds: int
    """What the API server granted (`spec.expirationSeconds` of its answer)."""

    def refresh_at(self) -> datetime:
        """When the kubelet would renew it: 80% through its lifetime, or at 24 h."""
        issued = self.expires_at - timedelta(seconds=self.lifetime_seconds)
        return min(
            issued + TOKEN_MAX_AGE,
            self.expires_at - timedelta(seconds=self.lifetime_seconds * 0.2),
        )


class VolumeSource(ObjectSource, Protocol):
    """Where volume contents come from: ConfigMaps, Secrets and service account tokens."""

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
        """A token bound to the pod; raises ConfigError when it cannot be had."""


TokenKey = tuple[str, str, str, int]
"""(namespace, service account, audience, expirationSeconds) of a projected token."""


class TokenTracker:
    """A VolumeSource that remembers the earliest renewal time of the tokens it handed
    out, and every grant (`grants`). Given the grants of the pod's last resolution
    (`kept`) and the time (`now`), it hands a kept token out again while it is not due
    for renewal, as the kubelet's token manager does: resolving a pod's volumes again
    for a changed ConfigMap does not mint a new token."""

    def __init__(
        self,
        source: VolumeSource,
        kept: Mapping[TokenKey, TokenGrant] | None = None,
        now: datetime | None = None,
    ) -> None:
        self._source = source
        self._kept = dict(kept or {})
        self._now = now
        self.refresh_at: datetime | None = None
        self.grants: dict[TokenKey, TokenGrant] = {}

    async def get_config_map(self, namespace: str, name: str) -> KubeObject | None:
        return await self._source.get_config_map(namespace, name)

    async def get_secret(self, namespace: str, name: str) -> KubeObject | None:
        return await self._source.get_secret(namespace, name)

    async def list_services(self, namespace: str) -> list[KubeObject]:
        return await self._source.list_services(namespace)

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
        key = (namespace, service_account, audience or "", expiration_seconds)
        grant = self._kept.get(key)
        if grant is None or self._now is None or grant.refresh_at() <= self._now:
            grant = await self._source.request_token(
                namespace,
                service_account,
                audience=audience,
                expiration_seconds=expiration_seconds,
                pod_name=pod_name,
                pod_uid=pod_uid,
            )
        self.grants[key] = grant
        due = grant.refresh_at()
        if self.refresh_at is None or due < self.refresh_at:
            self.refresh_at = due
        return grant


def check_path(path: str, what: str) -> str:
    """A volume file path as the API server validates it: relative, without `..`."""
    cleaned = path.rstrip("/")
    if not cleaned:
        raise ConfigError(f"{what}: empty path")
    if cleaned.startswith("/"):
        raise ConfigError(f"{what}: path {path!r} must be relative")
    if ".." in cleaned.split("/"):
        raise ConfigError(f"{what}: path {path!r} must not contain '..'")
    if "\x00" in cleaned:
        raise ConfigError(f"{what}: path {path!r} contains a NUL byte")
    return cleaned


def _mode(value: object, default: int, what: str) -> int:
    if value is None:
        return default
    if not isinstance(value, int) or isinstance(value, bool) or not 0 <= value <= 0o777:
        raise ConfigError(f"{what}: mode {value!r} is not between 0 and 0777")
    return value


async def _object_files(
    source: VolumeSource,
    namespace: str,
    kind: Kind,
    name: str,
    volume: KubeObject,
    default_mode: int,
    what: str,
) -> list[VolumeFile]:
    """Files of a configMap or secret volume (or projection source)."""
    optional = bool(volume.get("optional", False))
    data = await lookup(source, namespace, kind, name, optional)
    if data is None:
        return []
    items = volume.get("items")
    if not items:
        return [
            VolumeFile(check_path(key, what), value, default_mode)
            for key, value in sorted(data.items())
        ]
    files = []
    for item in items:
        value = key_value(
            data,
            str(item.get("key", "")),
            kind=kind,
            namespace=namespace,
            name=name,
            optional=optional,
            what=what,
        )
        if value is None:
            continue
        path = check_path(str(item.get("path", "")), what)
        files.append(VolumeFile(path, value, _mode(item.get("mode"), default_mode, what)))
    return files


def _format_map(values: Mapping[str, object]) -> str:
    """The downward API's rendering of labels or annotations: `key="value"` lines."""
    return "\n".join(
        f"{key}={json.dumps(str(values[key]), ensure_ascii=False)}" for key in sorted(values)
    )


def _downward_files(
    pod: KubeObject,
    items: Sequence[KubeObject],
    default_mode: int,
    host_ip: str,
    allocatable: Mapping[str, str],
    what: str,
) -> list[VolumeFile]:
    files = []
    containers = {str(c.get("name")): c for c in containers_of(pod) + init_containers_of(pod)}
    for item in items:
        path = check_path(str(item.get("path", "")), what)
        mode = _mode(item.get("mode"), default_mode, what)
        if "fieldRef" in item:
            field_path = str((item.get("fieldRef") or {}).get("fieldPath", ""))
            if field_path in ("metadata.labels", "metadata.annotations"):
                value = _format_map(meta(pod).get(field_path.split(".")[1]) or {})
            else:
                value = field_value(pod, field_path, host_ip)
        elif "resourceFieldRef" in item:
            ref = item.get("resourceFieldRef") or {}
            container = containers.get(str(ref.get("containerName", "")))
            if container is None:
                raise ConfigError(
                    f"{what}: resourceFieldRef names no container of the pod "
                    f"({ref.get('containerName')!r})"
                )
            value = resource_value(pod, container, ref, allocatable)
        else:
            raise ConfigError(f"{what}: item {path!r} has neither fieldRef nor resourceFieldRef")
        files.append(VolumeFile(path, value.encode(), mode))
    return files


async def _token_file(
    pod: KubeObject, source: VolumeSource, projection: KubeObject, default_mode: int, what: str
) -> VolumeFile:
    m = meta(pod)
    seconds = projection.get("expirationSeconds") or DEFAULT_TOKEN_SECONDS
    grant = await source.request_token(
        str(m.get("namespace", "")),
        str(spec(pod).get("serviceAccountName") or "default"),
        audience=projection.get("audience") or None,
        expiration_seconds=int(seconds),
        pod_name=str(m.get("name", "")),
        pod_uid=str(m.get("uid", "")),
    )
    path = check_path(str(projection.get("path", "")), what)
    return VolumeFile(path, grant.token.encode(), default_mode)


async def _projected_files(
    pod: KubeObject,
    projected: KubeObject,
    source: VolumeSource,
    host_ip: str,
    allocatable: Mapping[str, str],
    what: str,
) -> list[VolumeFile]:
    namespace = namespace_of(pod)
    default_mode = _mode(projected.get("defaultMode"), DEFAULT_MODE, what)
    files: list[VolumeFile] = []
    for entry in projected.get("sources") or []:
        if "configMap" in entry:
            cm = entry["configMap"] or {}
            files += await _object_files(
                source, namespace, "ConfigMap", str(cm.get("name", "")), cm, default_mode, what
            )
        elif "secret" in entry:
            secret = entry["secret"] or {}
            files += await _object_files(
                source, namespace, "Secret", str(secret.get("name", "")), secret, default_mode, what
            )
        elif "downwardAPI" in entry:
            items = (entry["downwardAPI"] or {}).get("items") or []
            files += _downward_files(pod, items, default_mode, host_ip, allocatable, what)
        elif "serviceAccountToken" in entry:
            token = entry["serviceAccountToken"] or {}
            files.append(await _token_file(pod, source, token, default_mode, what))
        # Other sources (clusterTrustBundle, podCertificate) are left to the backend,
        # which sees them in the volume's `source` and may refuse the pod.
    return files


def volume_kind(volume: KubeObject) -> str:
    """The volume's type: the one key of its spec besides `name`."""
    for kind in (*FILE_KINDS, *OTHER_KINDS):
        if kind in volume:
            return kind
    return next((k for k in volume if k != "name"), "unknown")


async def resolve_volume(
    pod: KubeObject,
    volume: KubeObject,
    source: VolumeSource,
    host_ip: str,
    allocatable: Mapping[str, str],
) -> VolumeConfig:
    """One volume of the pod, with its files when the kubelet provides them."""
    name = str(volume.get("name", ""))
    kind = volume_kind(volume)
    body: KubeObject = volume.get(kind) or {}
    what = f"volume {name!r}"
    namespace = namespace_of(pod)
    files: list[VolumeFile] = []
    if kind == "configMap":
        mode = _mode(body.get("defaultMode"), DEFAULT_MODE, what)
        files = await _object_files(
            source, namespace, "ConfigMap", str(body.get("name", "")), body, mode, what
        )
    elif kind == "secret":
        mode = _mode(body.get("defaultMode"), DEFAULT_MODE, what)
        files = await _object_files(
            source, namespace, "Secret", str(body.get("secretName", "")), body, mode, what
        )
    elif kind == "downwardAPI":
        mode = _mode(body.get("defaultMode"), DEFAULT_MODE, what)
        files = _downward_files(pod, body.get("items") or [], mode, host_ip, allocatable, what)
    elif kind == "projected":
        files = await _projected_files(pod, body, source, host_ip, allocatable, what)
    elif kind == "azureFile":
        # The in-tree Azure File volume names a Secret with the storage account's name
        # and key (azurestorageaccountname, azurestorageaccountkey), which the kubelet
        # reads to mount the share; a backend that mounts shares gets them as files.
        files = await _object_files(
            source,
            str(body.get("secretNamespace") or namespace),
            "Secret",
            str(body.get("secretName", "")),
            {},
            0o600,
            what,
        )
    return VolumeConfig(name=name, kind=kind, source=body, files=tuple(files))


async def resolve_volumes(
    pod: KubeObject,
    source: VolumeSource,
    host_ip: str,
    allocatable: Mapping[str, str],
    with_files: bool = True,
) -> tuple[VolumeConfig, ...]:
    """Every volume of the pod in spec order; raises ConfigError for missing objects.

    Without `with_files` (a backend that does not read volume files) the volumes are
    only described: no ConfigMap, Secret or token is fetched for them."""
    if not with_files:
        return tuple(
            VolumeConfig(
                name=str(v.get("name", "")), kind=volume_kind(v), source=v.get(volume_kind(v)) or {}
            )
            for v in volumes_of(pod)
        )
    return tuple(
        [
            await resolve_volume(pod, volume, source, host_ip, allocatable)
            for volume in volumes_of(pod)
        ]
    )


def files_digest(volumes: Sequence[VolumeConfig]) -> str:
    """One hash of what the pod's file volumes hold (names, paths, modes, bytes): a
    volume resolved again is handed to the backend only when it changed."""
    digest = hashlib.blake2b(digest_size=16)
    for volume in volumes:
        for item in volume.files:
            head = f"{volume.name}\0{item.path}\0{item.mode}\0{len(item.data)}\0"
            digest.update(head.encode())
            digest.update(item.data)
    return digest.hexdigest()


def _digest(data: bytes) -> str:
    """A short digest, kept per running pod to tell a change: 32 hex digits."""
    return hashlib.blake2b(data, digest_size=16).hexdigest()


def follows_sources(pod: KubeObject) -> bool:
    """Whether the pod has volumes whose contents come from API objects or its own
    metadata (configMap, secret, downwardAPI, projected): resolved again while it runs."""
    return any(FILE_KINDS & set(volume) for volume in volumes_of(pod))


def metadata_key(pod: KubeObject) -> str:
    """What of the pod's metadata a downward API volume may show (labels, annotations),
    as a digest of it (kept per running pod, only compared); "" when the pod has no
    downward API volume."""
    for volume in volumes_of(pod):
        sources = (volume.get("projected") or {}).get("sources") or []
        if "downwardAPI" in volume or any("downwardAPI" in entry for entry in sources):
            m = meta(pod)
            shown = json.dumps([m.get("labels") or {}, m.get("annotations") or {}], sort_keys=True)
            return _digest(shown.encode())
    return ""


def has_token_volumes(pod: KubeObject) -> bool:
    """Whether the pod projects a service account token (and so needs renewals)."""
    for volume in volumes_of(pod):
        for entry in (volume.get("projected") or {}).get("sources") or []:
            if "serviceAccountToken" in entry:
                return True
    return False


def token_request(
    audience: str | None, expiration_seconds: int, pod_name: str, pod_uid: str
) -> KubeObject:
    """The TokenRequest body the kubelet sends for a pod's projected token."""
    return {
        "apiVersion": "authentication.k8s.io/v1",
        "kind": "TokenRequest",
        "spec": {
            "audiences": [audience] if audience else [],
            "expirationSeconds": expiration_seconds,
            "boundObjectRef": {
                "apiVersion": "v1",
                "kind": "Pod",
                "name": pod_name,
                "uid": pod_uid,
            },
        },
    }


def token_grant(answer: KubeObject, requested_seconds: int) -> TokenGrant:
    """The token and its expiry from a TokenRequest answer."""
    status = answer.get("status") or {}
    token = status.get("token")
    if not token:
        raise ConfigError("the TokenRequest answer holds no token")
    seconds = int((answer.get("spec") or {}).get("expirationSeconds") or requested_seconds)
    expiry = status.get("expirationTimestamp")
    expires_at = parse_or_none(expiry) or datetime.now(UTC) + timedelta(seconds=seconds)
    return TokenGrant(str(token), expires_at, seconds)
