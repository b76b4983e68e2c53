"""The tags that tie a cloud resource to the node and pod that made it.

A cloud backend must find what it created after a restart, adopt what a pod still
owns and remove what no pod owns, and never touch anything it did not make. Every
resource it creates therefore carries the node's name and the pod's namespace, name
and UID under vkpy's own prefix. The rules of each cloud (which keys and values it
accepts, how many tags) differ and stay with each backend; the ownership itself and
copying pod labels while there is room are the same everywhere, and live here.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

from vkpy.providers.base import PodRef

PREFIX = "vkpy.io/"
NODE = PREFIX + "node"
NAMESPACE = PREFIX + "pod-namespace"
NAME = PREFIX + "pod-name"
UID = PREFIX + "pod-uid"


def ownership(node: str, ref: PodRef) -> dict[str, str]:
    """The four tags that say `node` made this resource for the pod `ref`."""
    return {NODE: node, NAMESPACE: ref.namespace, NAME: ref.name, UID: ref.uid}


def add_labels(
    tags: dict[str, str],
    labels: Mapping[str, str] | None,
    allowed: Callable[[str, str], bool],
    max_tags: int,
) -> dict[str, str]:
    """Copy pod labels (sorted, never under vkpy's prefix) while the cloud allows more."""
    for key, value in sorted((labels or {}).items()):
        if len(tags) >= max_tags:
            break
        if not key.startswith(PREFIX) and allowed(key, str(value)):
            tags[key] = str(value)
    return tags


def owner(tags: Mapping[str, str] | None, node: str) -> PodRef | None:
    """The pod that owns a resource with these tags, if `node` made it."""
    tags = tags or {}
    if tags.get(NODE) != node:
        return None
    namespace, name, uid = tags.get(NAMESPACE), tags.get(NAME), tags.get(UID)
    if not (namespace and name and uid):
        return None
    return PodRef(namespace, name, uid)
