"""ConfigMaps and Secrets a pod refers to, looked up with the `optional` rule in one place.

Environment variables (configMapKeyRef, secretKeyRef, envFrom) and volumes
(configMap, secret, and their projections) all name an object and perhaps a key,
each marked `optional` or not. The kubelet's rule is the same everywhere: a missing
optional object or key is skipped, a missing required one is a
CreateContainerConfigError (`ConfigError`) with the kubelet's message. This module is
that rule, and the one decoder of ConfigMap and Secret data.
"""

from __future__ import annotations

import base64
import binascii
from typing import Literal, Protocol

from vkpy.core.objects import KubeObject

Kind = Literal["ConfigMap", "Secret"]


class ConfigError(Exception):
    """The pod's configuration refers to something missing (CreateContainerConfigError)."""


class ObjectSource(Protocol):
    async def get_config_map(self, namespace: str, name: str) -> KubeObject | None: ...

    async def get_secret(self, namespace: str, name: str) -> KubeObject | None: ...

    async def list_services(self, namespace: str) -> list[KubeObject]: ...


def object_data(obj: KubeObject, kind: Kind) -> dict[str, bytes]:
    """A ConfigMap's data and binaryData, or a Secret's decoded data, as bytes."""
    out: dict[str, bytes] = {}
    try:
        if kind == "Secret":
            for key, value in (obj.get("data") or {}).items():
                out[key] = base64.b64decode(value)
            for key, value in (obj.get("stringData") or {}).items():
                out[key] = str(value).encode()
            return out
        for key, value in (obj.get("data") or {}).items():
            out[key] = str(value).encode()
        for key, value in (obj.get("binaryData") or {}).items():
            out[key] = base64.b64decode(value)
    except (binascii.Error, ValueError) as error:
        raise ConfigError(f"{kind} data that is not base64: {error}") from None
    return out


async def lookup(
    source: ObjectSource, namespace: str, kind: Kind, name: str, optional: bool
) -> dict[str, bytes] | None:
    """The object's data; None when it is missing and `optional`, ConfigError when it
    is missing and required."""
    obj = await (
        source.get_secret(namespace, name)
        if kind == "Secret"
        else source.get_config_map(namespace, name)
    )
    if obj is None:
        if optional:
            return None
        raise ConfigError(f'{kind.lower()} "{name}" not found')
    return object_data(obj, kind)


def key_value(
    data: dict[str, bytes],
    key: str,
    *,
    kind: Kind,
    namespace: str,
    name: str,
    optional: bool,
    what: str = "",
) -> bytes | None:
    """`data[key]`; None when it is missing and `optional`, ConfigError when it is
    missing and required (`what` says where the reference is, for the message)."""
    if key in data:
        return data[key]
    if optional:
        return None
    where = f" ({what})" if what else ""
    raise ConfigError(f"couldn't find key {key} in {kind} {namespace}/{name}{where}")
