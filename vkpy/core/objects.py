"""Plain-JSON views of Kubernetes objects shared by every layer.

The API server speaks JSON and vkpy keeps objects as the dicts it decoded (fast, and
nothing is lost between versions). This module names that shape once, with a few
read-only accessors, so signatures say "a Kubernetes object" rather than "Any", and
the fields the code reads are read one way (`uid_of(pod)`, `node_name_of(pod)`, ...)
rather than by ad hoc `str(meta(pod).get("uid"))`: a missing field reads as "" or an
empty collection, never as the string "None". The `_of` suffix keeps them apart from
the local variables (`uid`, `name`) they are usually assigned to.
"""

from __future__ import annotations

from typing import Any

KubeObject = dict[str, Any]
"""A Kubernetes object (or part of one) as decoded from JSON. Never mutated in place."""


def meta(obj: KubeObject) -> KubeObject:
    """The object's metadata (empty when absent)."""
    value: KubeObject = obj.get("metadata") or {}
    return value


def spec(obj: KubeObject) -> KubeObject:
    """The object's spec (empty when absent)."""
    value: KubeObject = obj.get("spec") or {}
    return value


def status(obj: KubeObject) -> KubeObject:
    """The object's status (empty when absent)."""
    value: KubeObject = obj.get("status") or {}
    return value


def name_of(obj: KubeObject) -> str:
    """metadata.name ("" when absent)."""
    return str(meta(obj).get("name") or "")


def namespace_of(obj: KubeObject) -> str:
    """metadata.namespace ("" when absent: cluster-scoped)."""
    return str(meta(obj).get("namespace") or "")


def uid_of(obj: KubeObject) -> str:
    """metadata.uid ("" when absent)."""
    return str(meta(obj).get("uid") or "")


def resource_version_of(obj: KubeObject) -> str:
    """metadata.resourceVersion ("" when absent)."""
    return str(meta(obj).get("resourceVersion") or "")


def labels_of(obj: KubeObject) -> dict[str, str]:
    """metadata.labels (empty when absent)."""
    value: dict[str, str] = meta(obj).get("labels") or {}
    return value


def annotations_of(obj: KubeObject) -> dict[str, str]:
    """metadata.annotations (empty when absent)."""
    value: dict[str, str] = meta(obj).get("annotations") or {}
    return value


def node_name_of(pod: KubeObject) -> str:
    """spec.nodeName of a pod ("" when not bound)."""
    return str(spec(pod).get("nodeName") or "")


def containers_of(pod: KubeObject) -> list[KubeObject]:
    """spec.containers of a pod."""
    value: list[KubeObject] = spec(pod).get("containers") or []
    return value


def init_containers_of(pod: KubeObject) -> list[KubeObject]:
    """spec.initContainers of a pod."""
    value: list[KubeObject] = spec(pod).get("initContainers") or []
    return value


def ephemeral_containers_of(pod: KubeObject) -> list[KubeObject]:
    """spec.ephemeralContainers of a pod."""
    value: list[KubeObject] = spec(pod).get("ephemeralContainers") or []
    return value


def volumes_of(pod: KubeObject) -> list[KubeObject]:
    """spec.volumes of a pod."""
    value: list[KubeObject] = spec(pod).get("volumes") or []
    return value


def conditions_of(obj: KubeObject) -> list[KubeObject]:
    """status.conditions (empty when absent)."""
    value: list[KubeObject] = status(obj).get("conditions") or []
    return value


def key(obj: KubeObject) -> str:
    """`namespace/name` for logs and messages."""
    m = meta(obj)
    return f"{m.get('namespace', '')}/{m.get('name', '')}"
