"""Plain-JSON views of Kubernetes objects shared by every layer.

The API server speaks JSON and vkpy keeps objects as the dicts it decoded (fast, and
nothing is lost between versions). This module names that shape once, with a few
read-only accessors, so signatures say "a Kubernetes object" rather than "Any".
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


def key(obj: KubeObject) -> str:
    """`namespace/name` for logs and messages."""
    m = meta(obj)
    return f"{m.get('namespace', '')}/{m.get('name', '')}"
