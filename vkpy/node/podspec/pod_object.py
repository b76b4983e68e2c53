"""What the pod path names a pod by: its ref, its place on the API server, its images.

A pod is known to the backend by its `PodRef` (namespace, name, UID), to the API
server by its path, and its spec is applied again when the images of its containers
change. Each of the pod controller's steps, the status writer, the deletion cost and
the `PodConfig` builder needs one of these; they are read here, once, instead of in
three unrelated modules.
"""

from __future__ import annotations

import sys

from vkpy.core.objects import KubeObject, containers_of, name_of, namespace_of, uid_of
from vkpy.providers.base import PodRef


def pod_ref(pod: KubeObject) -> PodRef:
    """The pod's namespace, name and UID, as the backend knows it. The namespace is
    interned: a node's pods share a few, and each decoded pod brings its own copy."""
    return PodRef(sys.intern(namespace_of(pod)), name_of(pod), uid_of(pod))


def pod_path(ref: PodRef) -> str:
    """The pod's path on the API server (append `/status` for its status)."""
    return f"/api/v1/namespaces/{ref.namespace}/pods/{ref.name}"


def images(pod: KubeObject) -> tuple[str, ...]:
    """The images of the pod's containers, in order (a change is applied to the backend);
    interned, as pods of one workload share them and each running pod keeps these."""
    return tuple(sys.intern(str(c.get("image", ""))) for c in containers_of(pod))
