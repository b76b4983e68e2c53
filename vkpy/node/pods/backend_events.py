"""Events a backend reports about its pods, written as the kubelet writes its own.

A backend that implements `ReportsEvents` (the process backend: failed probes, a
container killed by its liveness probe) calls back with a `PodEvent` each time
something happens; this turns it into an Event on the pod, with the container's
fieldPath. Probes fail every period for as long as a container is unhealthy, so
like the kubelet's spam filter each (pod, container, reason) gets a burst of
`burst` Events and then one more every `refill_seconds`; repeats of one message are
further folded into one Event's count by the EventRecorder. Kept apart from the pod
controller: it needs only the recorder and a way to find a pod's spec.
"""

from __future__ import annotations

import time
from collections import OrderedDict
from collections.abc import Callable

from vkpy.core import metrics
from vkpy.core.objects import KubeObject, spec
from vkpy.kube.events import EventRecorder, InvolvedObject, TokenBucket
from vkpy.providers.base import PodEvent, PodRef, Provider, ReportsEvents

FindPod = Callable[[str, str, str | None], KubeObject | None]
"""(namespace, name, uid) → the pod as last seen, if this node has it."""

BURST = 25
REFILL_SECONDS = 300.0
"""The kubelet's event spam filter: 25 at once, then one per 5 minutes."""
_MAX_KEYS = 10_000

_FIELDS = (
    ("containers", "spec.containers"),
    ("initContainers", "spec.initContainers"),
    ("ephemeralContainers", "spec.ephemeralContainers"),
)


def field_path(pod: KubeObject | None, container: str | None) -> str:
    """The Event's fieldPath for one of the pod's containers (`spec.containers{x}`)."""
    if not container:
        return ""
    for key, path in _FIELDS:
        if any(c.get("name") == container for c in spec(pod or {}).get(key) or ()):
            return f"{path}{{{container}}}"
    return f"spec.containers{{{container}}}"


class BackendEvents:
    """The `EventCallback` given to a backend: rate limit, then record."""

    def __init__(
        self,
        recorder: EventRecorder,
        find_pod: FindPod,
        burst: int = BURST,
        refill_seconds: float = REFILL_SECONDS,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._recorder = recorder
        self._find_pod = find_pod
        self._burst = burst
        self._rate = 1.0 / refill_seconds
        self._clock = clock
        self._buckets: OrderedDict[tuple[str, str, str], TokenBucket] = OrderedDict()

    def __call__(self, ref: PodRef, event: PodEvent) -> None:
        key = (ref.uid, event.container or "", event.reason)
        bucket = self._buckets.get(key)
        if bucket is None:
            bucket = self._buckets[key] = TokenBucket(self._rate, self._burst, self._clock)
            while len(self._buckets) > _MAX_KEYS:
                self._buckets.popitem(last=False)
        self._buckets.move_to_end(key)
        if not bucket.take():
            metrics.EVENTS.labels("dropped").inc()
            return
        pod = self._find_pod(ref.namespace, ref.name, ref.uid)
        involved = InvolvedObject(
            kind="Pod",
            name=ref.name,
            namespace=ref.namespace,
            uid=ref.uid,
            field_path=field_path(pod, event.container),
        )
        self._recorder.emit(involved, event.type, event.reason, event.message)


def forward_backend_events(provider: Provider, recorder: EventRecorder, find_pod: FindPod) -> None:
    """Give the backend its event callback, if it reports events (before `start`)."""
    if isinstance(provider, ReportsEvents):
        provider.on_event(BackendEvents(recorder, find_pod))
