"""Everything the pod controller knows about one pod, in one record.

A pod's record holds the last object seen from the API server (None once the API
no longer has it), its ref, the stage of its life on this node and what that stage
carries, the warnings already sent as Events and the status last decided. The
stage is a tagged value, so what cannot happen cannot be written down: a pod not
yet created has no applied images, a stopping pod has no token to renew, a final
pod has its final state. Forgetting a pod is deleting its record. Which watched
updates ask the kubelet for anything is decided here (`asks_kubelet`) for spec and
metadata, and in pod_reporting for the status it wrote itself. Virtual
Kubelet's `knownPod` is the model.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from vkpy.core.objects import KubeObject, conditions_of, meta, spec
from vkpy.node.pods.pod_status import KUBELET_CONDITIONS
from vkpy.node.podspec.volumes import TokenGrant, TokenKey
from vkpy.providers.base import PodRef, PodState


@dataclass(frozen=True, slots=True)
class Absent:
    """Not (or no longer) in the backend: to be created if the pod should run."""


@dataclass(frozen=True, slots=True)
class Created:
    """The backend holds the pod; its state is the backend's to tell."""

    images: tuple[str, ...] | None = None
    """The container images the backend runs (None: adopted, not known)."""
    token_due: float | None = None
    """When (epoch s) the pod's projected tokens are due for renewal (None: unknown)."""
    volumes_due: float | None = None
    """When (epoch s) the pod's volumes are resolved again (None: not followed)."""
    metadata_key: str = ""
    """The labels and annotations its downward API volumes last showed (volumes.py)."""
    tokens: Mapping[TokenKey, TokenGrant] = field(default_factory=dict)
    """The tokens its volumes hold, handed out again until due."""
    files_digest: str = ""
    """What its file volumes held when last handed to the backend (volumes.py)."""


@dataclass(frozen=True, slots=True)
class Stopping:
    """Being stopped in the backend; `final` is the state to report once stopped
    (None: the pod is being deleted and will not be reported again)."""

    final: PodState | None = None


@dataclass(frozen=True, slots=True)
class Final:
    """Done on this node (stopped, or never runnable): `state` is all there is to say."""

    state: PodState


@dataclass(frozen=True, slots=True)
class Deleted:
    """Stopped and deleted from the API server; waiting for the watch to agree."""


Stage = Absent | Created | Stopping | Final | Deleted


@dataclass(slots=True)
class PodRecord:
    ref: PodRef
    pod: KubeObject | None
    """The newest object seen (watch or our own write's answer); None: not on the API."""
    stage: Stage = field(default_factory=Absent)
    warned: frozenset[str] = frozenset()
    """Backend warnings already sent as Events."""
    reported: KubeObject | None = None
    """The status last decided for the pod (written, or found already there); set
    and read by pod_reporting only (PodReporter.write, is_echo)."""
    cost_written: bool = False
    """The pod deletion cost was written on it (deletion_cost): not tried again."""
    unread_change: bool = False
    """The backend said the pod may have changed while its sync ran, and no state was
    read from it since: the controller syncs the pod once more (a push before the
    sync's own read is covered by that read and costs nothing)."""

    @property
    def in_backend(self) -> bool:
        """Whether the backend may hold the pod (it must be stopped before forgetting)."""
        return isinstance(self.stage, Created | Stopping)


def newer(candidate: KubeObject, current: KubeObject | None) -> bool:
    """Whether `candidate` is at least as new as `current` (by resourceVersion)."""
    if current is None:
        return True
    try:
        return int(meta(candidate)["resourceVersion"]) >= int(meta(current)["resourceVersion"])
    except (KeyError, ValueError):
        return True


_IGNORED_METADATA = ("resourceVersion", "managedFields", "generation")


def _metadata(pod: KubeObject) -> KubeObject:
    out = dict(meta(pod))  # a C copy, then three pops: cheaper than a comprehension
    for key in _IGNORED_METADATA:
        out.pop(key, None)
    return out


def _others_conditions(pod: KubeObject) -> list[KubeObject]:
    return [c for c in conditions_of(pod) if c.get("type") not in KUBELET_CONDITIONS]


def asks_kubelet(before: KubeObject | None, update: KubeObject) -> bool:
    """Whether a watched update of a pod changed what the kubelet acts on, besides the
    status it writes itself (pod_reporting.is_echo tells that part): its spec or
    metadata, or conditions others own (readiness gates). A bare resourceVersion bump
    does not. Every update of a pod never seen before does."""
    if before is None:
        return True
    if spec(before) != spec(update) or _metadata(before) != _metadata(update):
        return True
    return _others_conditions(before) != _others_conditions(update)
