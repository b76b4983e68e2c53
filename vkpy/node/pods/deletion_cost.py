"""Opt-in `controller.kubernetes.io/pod-deletion-cost` on the pods of this node.

When a ReplicaSet scales in, its controller ranks the pods to delete: unscheduled,
then not running, then not ready, then by this annotation (lowest first), and only
then by how many of the set's pods share a node, how recently they became ready and
their restarts. On a hybrid cluster the replicas on a virtual node cost money per
pod, but nothing in that ranking prefers them: a regular node that holds more of the
set's replicas than the virtual node loses its pods first. With `--pod-deletion-cost
N` (N below the default 0, e.g. -100) vkpy writes the annotation on every pod it
runs that belongs to a ReplicaSet, so those replicas go first. A pod that already
carries the annotation keeps the value its owner gave it. Writing it is the first
step of a pod's life on the node (pod_life), before the backend creates it.
"""

from __future__ import annotations

import logging

from vkpy.core.objects import KubeObject, meta
from vkpy.kube.client import MERGE_PATCH, ApiError, KubeClient
from vkpy.node.podspec.pod_object import pod_path, pod_ref

log = logging.getLogger(__name__)

ANNOTATION = "controller.kubernetes.io/pod-deletion-cost"


def wants_cost(pod: KubeObject) -> bool:
    """True for a live pod owned by a ReplicaSet that has no deletion cost yet."""
    metadata = meta(pod)
    if metadata.get("deletionTimestamp"):
        return False
    if ANNOTATION in (metadata.get("annotations") or {}):
        return False
    owners = metadata.get("ownerReferences") or []
    return any(o.get("kind") == "ReplicaSet" and o.get("controller") for o in owners)


class DeletionCost:
    """Writes the configured cost on a pod; `PodLife` asks once per pod, until done."""

    def __init__(self, client: KubeClient, cost: int | None) -> None:
        self._client = client
        self._cost = cost

    async def write(self, pod: KubeObject) -> KubeObject | None:
        """Annotate the pod if it wants the cost; the API's answer once written, None
        when it needs none or the write failed (a later sync tries again)."""
        if self._cost is None or not wants_cost(pod):
            return None
        ref = pod_ref(pod)
        body = {"metadata": {"uid": ref.uid, "annotations": {ANNOTATION: str(self._cost)}}}
        try:
            return await self._client.patch(pod_path(ref), body, MERGE_PATCH)
        except ApiError as error:
            # Not a reason to hold the pod back: it runs either way, and a later sync
            # tries again (a gone pod answers 404 or 409 and is forgotten soon).
            log.warning(
                "could not set the pod deletion cost",
                extra={"pod": str(ref), "error": str(error)},
            )
            return None
