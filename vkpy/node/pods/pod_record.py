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
from types import MappingProxyType

from vkpy.core import jsoncodec, packed_json
from vkpy.core.objects import KubeObject, conditions_of, meta, spec
from vkpy.node.pods.pod_status import KUBELET_CONDITIONS
from vkpy.node.podspec.volumes import TokenGrant, TokenKey
from vkpy.providers.base import PodRef, PodState

NO_TOKENS: Mapping[TokenKey, TokenGrant] = MappingProxyType({})


@dataclass(frozen=True, slots=True)
class PullBackOff:
    """An image pull failed: the pod's create waits until `until` (epoch s), the
    containers in `images` (name, image) shown with ImagePullBackOff meanwhile; a
    changed image is tried at once (cannot_start)."""

    failures: int
    until: float
    images: tuple[tuple[str, str], ...]


@dataclass(frozen=True, slots=True)
class Absent:
    """Not (or no longer) in the backend: to be created if the pod should run; after
    a failed image pull, not before its back-off ends (`pull_backoff`)."""

    pull_backoff: PullBackOff | None = None


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
    tokens: Mapping[TokenKey, TokenGrant] = field(default_factory=lambda: NO_TOKENS)
    """The tokens its volumes hold, handed out again until due (most pods: none, and
    then the one shared empty mapping rather than a dict each)."""
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


class PodRecord:
    """One pod's record (see the module docstring).

    The pod's object is held decoded only while the pod has work: from the change
    that asks for a sync until the sync ends (`settle`). Between syncs it is kept
    packed, as the JSON the watch brought (without managedFields) deflated by
    vkpy.core.packed_json: a running pod's dicts were about 10.7 KiB and 190 objects,
    its JSON is about 2.3-2.8 KiB, deflated about 0.4 KiB; at 1000 nodes with 10 pods
    each the dicts, then the JSON, were the largest share of the agent's memory
    (docs/scale.md, seventh and eighth rounds). The status last decided is kept packed
    for the same reason (2.7 KiB as dicts, 1 KiB as JSON, 0.1 KiB deflated)."""

    __slots__ = (
        "_packed",
        "_pod",
        "_reported",
        "_version",
        "cost_written",
        "ref",
        "stage",
        "unread_change",
        "warned",
    )

    def __init__(
        self,
        ref: PodRef,
        pod: KubeObject | None,
        stage: Stage | None = None,
        reported: KubeObject | None = None,
    ) -> None:
        self.ref = ref
        self._pod: KubeObject | None = None
        self._packed: bytes | None = None
        self._version = ""
        self.pod = pod
        self.stage: Stage = stage if stage is not None else Absent()
        self.warned: frozenset[str] = frozenset()
        """Backend warnings already sent as Events."""
        self._reported: bytes | None = None
        self.reported = reported
        self.cost_written = False
        """The pod deletion cost was written on it (deletion_cost): not tried again."""
        self.unread_change = False
        """The backend said the pod may have changed while its sync ran, and no state
        was read from it since: the controller syncs the pod once more (a push before
        the sync's own read is covered by that read and costs nothing)."""

    @property
    def pod(self) -> KubeObject | None:
        """The newest object seen (watch or our own write's answer); None: not on the
        API. Read while settled, it is decoded and held until the next `settle`."""
        if self._pod is None and self._packed is not None:
            self._pod = packed_json.unpack(self._packed)
        return self._pod

    @pod.setter
    def pod(self, value: KubeObject | None) -> None:
        self._pod = value
        self._packed = None
        self._version = "" if value is None else str(meta(value).get("resourceVersion", ""))

    @property
    def present(self) -> bool:
        """Whether the API server has the pod (as last seen), without decoding it."""
        return self._pod is not None or self._packed is not None

    def view(self) -> KubeObject | None:
        """The pod for a reader outside its syncs (the kubelet API): decoded for the
        caller alone when settled, so reading every pod holds none of them decoded."""
        if self._pod is not None or self._packed is None:
            return self._pod
        view: KubeObject = packed_json.unpack(self._packed)
        return view

    def json(self) -> bytes:
        """The pod's JSON (the kubelet API's /pods): inflated from the packed bytes when
        settled, so no request decodes or encodes a settled pod; else encoded now."""
        if self._packed is not None:
            return packed_json.json_of(self._packed)
        return jsoncodec.dumps(_slim(self._pod)) if self._pod is not None else b"null"

    def settle(self) -> None:
        """The pod's work is done for now: keep its object packed until it changes or
        is synced again. Nothing may change the decoded object in place (it is the
        watch's, or an answer's): a decoded copy of packed JSON is dropped as is."""
        if self._pod is not None:
            if self._packed is None:
                self._packed = packed_json.pack(_slim(self._pod))
            self._pod = None

    def older_than(self, candidate: KubeObject) -> bool:
        """Whether `candidate` is newer than the pod held (by resourceVersion; True when
        nothing is held or the versions cannot be compared). The same version is the
        same object: the watch's echo of vkpy's own write, whose answer is held already,
        is passed over without being read."""
        if not self.present:
            return True
        try:
            return int(meta(candidate)["resourceVersion"]) > int(self._version)
        except (KeyError, ValueError):
            return True

    @property
    def reported(self) -> KubeObject | None:
        """The status last decided for the pod (written, or found already there); set
        and read by pod_reporting only (PodReporter.write, is_echo). Kept packed: a
        fresh copy each read."""
        if self._reported is None:
            return None
        decided: KubeObject = packed_json.unpack(self._reported)
        return decided

    @reported.setter
    def reported(self, value: KubeObject | None) -> None:
        self._reported = None if value is None else packed_json.pack(value)

    @property
    def in_backend(self) -> bool:
        """Whether the backend may hold the pod (it must be stopped before forgetting)."""
        return isinstance(self.stage, Created | Stopping)


def _slim(pod: KubeObject) -> KubeObject:
    """The pod without managedFields (an API answer carries them; the watch drops them,
    vkpy.kube.watch), as a shallow copy when there were any."""
    metadata = meta(pod)
    if "managedFields" not in metadata:
        return pod
    return {**pod, "metadata": {k: v for k, v in metadata.items() if k != "managedFields"}}


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
