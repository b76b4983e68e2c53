"""Environment variables and `$(VAR)` expansion, resolved the way the kubelet does.

Backends get final values: `value` (with references to earlier variables expanded),
`valueFrom` (configMapKeyRef, secretKeyRef, fieldRef, resourceFieldRef) and `envFrom`.
A missing required ConfigMap, Secret or key raises `ConfigError`, which the pod
controller reports as CreateContainerConfigError while the pod stays Pending and is
retried until the object appears. Values are never logged.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence
from decimal import Decimal

from vkpy.node.podspec.config_objects import ConfigError, Kind, ObjectSource, key_value, lookup

__all__ = ["ConfigError", "ObjectSource", "expand", "field_value", "resolve_env", "resource_value"]
from vkpy.core.objects import KubeObject, meta, namespace_of, spec, status
from vkpy.core.quantity import QuantityError, parse_quantity

REFS: tuple[tuple[Kind, str], ...] = (("ConfigMap", "configMapRef"), ("Secret", "secretRef"))
_ENV_NAME = re.compile(r"^[-._a-zA-Z][-._a-zA-Z0-9]*$")


def expand(text: str, variables: Mapping[str, str]) -> str:
    """Expand `$(NAME)` from `variables`; `$$` is a literal `$`; unknown stays as written."""
    out: list[str] = []
    i = 0
    while i < len(text):
        char = text[i]
        if char != "$" or i + 1 >= len(text):
            out.append(char)
            i += 1
            continue
        following = text[i + 1]
        if following == "$":
            out.append("$")
            i += 2
        elif following == "(":
            end = text.find(")", i + 2)
            if end < 0:
                out.append(text[i:])
                break
            name = text[i + 2 : end]
            out.append(variables.get(name, text[i : end + 1]))
            i = end + 1
        else:
            out.append(char)
            i += 1
    return "".join(out)


def field_value(pod: KubeObject, path: str, host_ip: str) -> str:
    """The downward API's fieldRef value for `path`."""
    m = meta(pod)
    match = re.fullmatch(r"metadata\.(labels|annotations)\['(.+)'\]", path)
    if match:
        return str((m.get(match.group(1)) or {}).get(match.group(2), ""))
    pod_ip = status(pod).get("podIP") or host_ip
    simple = {
        "metadata.name": m.get("name", ""),
        "metadata.namespace": m.get("namespace", ""),
        "metadata.uid": m.get("uid", ""),
        "spec.nodeName": spec(pod).get("nodeName", ""),
        "spec.serviceAccountName": spec(pod).get("serviceAccountName", ""),
        "status.hostIP": host_ip,
        "status.hostIPs": host_ip,
        "status.podIP": pod_ip,
        "status.podIPs": pod_ip,
    }
    if path not in simple:
        raise ConfigError(f"unsupported fieldRef {path!r}")
    return str(simple[path])


POD_LEVEL_RESOURCES = ("cpu", "memory")
"""What pod-level resources (spec.resources) may set, and so default a limit to."""


def _pod_limit(pod: KubeObject, name: str) -> str | None:
    raw = ((spec(pod).get("resources") or {}).get("limits") or {}).get(name)
    if raw is None or name not in POD_LEVEL_RESOURCES:
        return None
    try:
        return None if parse_quantity(raw) == 0 else str(raw)
    except QuantityError:
        return None


def resource_value(
    pod: KubeObject, container: KubeObject, ref: KubeObject, allocatable: Mapping[str, str]
) -> str:
    """The downward API's resourceFieldRef value: a limit (or, without one, the pod's
    limit from pod-level resources, else the node's allocatable), divided by the divisor
    and rounded up. A divisor of 0 (what the API server stores when none was given)
    means 1, as the kubelet reads it."""
    resource = str(ref.get("resource", ""))
    kind, _, name = resource.partition(".")
    section = (container.get("resources") or {}).get(kind) or {}
    raw = section.get(name)
    if raw is None and kind == "limits":
        raw = _pod_limit(pod, name) or allocatable.get(name)
    if raw is None and kind == "requests":
        raw = "0"
    if raw is None:
        raise ConfigError(f"unsupported resourceFieldRef {resource!r}")
    try:
        value = parse_quantity(raw)
        divisor = parse_quantity(ref.get("divisor") or "1")
    except QuantityError as error:
        raise ConfigError(str(error)) from error
    if divisor == 0:
        divisor = Decimal(1)
    return str(math.ceil(value / divisor))


async def _key_value(
    source: ObjectSource, namespace: str, ref: KubeObject, kind: Kind
) -> str | None:
    name = str(ref.get("name", ""))
    optional = bool(ref.get("optional", False))
    data = await lookup(source, namespace, kind, name, optional)
    if data is None:
        return None
    key = str(ref.get("key", ""))
    value = key_value(data, key, kind=kind, namespace=namespace, name=name, optional=optional)
    return None if value is None else value.decode("utf-8", "replace")


async def _env_from(
    source: ObjectSource, namespace: str, container: KubeObject
) -> list[tuple[str, str]]:
    out: list[tuple[str, str]] = []
    for entry in container.get("envFrom") or []:
        prefix = str(entry.get("prefix", ""))
        for kind, field in REFS:
            ref = entry.get(field)
            if not ref:
                continue
            name = str(ref.get("name", ""))
            data = await lookup(source, namespace, kind, name, bool(ref.get("optional")))
            for key, value in sorted((data or {}).items()):
                if _ENV_NAME.match(prefix + key):
                    out.append((prefix + key, value.decode("utf-8", "replace")))
    return out


async def resolve_env(
    pod: KubeObject,
    container: KubeObject,
    source: ObjectSource,
    host_ip: str,
    allocatable: Mapping[str, str],
    links: Sequence[tuple[str, str]] = (),
) -> list[tuple[str, str]]:
    """The container's environment in order, later definitions winning; `links`
    (service_env.py) first, so the container's own variables win over them."""
    namespace = namespace_of(pod)
    values: dict[str, str] = dict(links)
    for name, found in await _env_from(source, namespace, container):
        values.pop(name, None)
        values[name] = found
    for var in container.get("env") or []:
        name = str(var.get("name", ""))
        value_from = var.get("valueFrom")
        value: str | None
        if not value_from:
            value = expand(str(var.get("value", "")), values)
        elif "fieldRef" in value_from:
            value = field_value(pod, str(value_from["fieldRef"].get("fieldPath", "")), host_ip)
        elif "resourceFieldRef" in value_from:
            value = resource_value(pod, container, value_from["resourceFieldRef"], allocatable)
        elif "configMapKeyRef" in value_from:
            value = await _key_value(source, namespace, value_from["configMapKeyRef"], "ConfigMap")
        elif "secretKeyRef" in value_from:
            value = await _key_value(source, namespace, value_from["secretKeyRef"], "Secret")
        else:
            raise ConfigError(f"unsupported valueFrom in env {name!r}")
        if value is not None:
            values.pop(name, None)
            values[name] = value
    return list(values.items())
