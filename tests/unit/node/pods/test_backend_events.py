"""Backend events become pod Events with the container's fieldPath, rate limited per
(pod, container, reason) as the kubelet's spam filter does."""

from __future__ import annotations

from typing import cast

from vkpy.core.objects import KubeObject
from vkpy.kube.events import EventRecorder, InvolvedObject
from vkpy.node.pods.backend_events import BackendEvents
from vkpy.providers.base import PodEvent, PodRef

REF = PodRef("ns", "web", "uid-1")
POD: KubeObject = {
    "metadata": {"namespace": "ns", "name": "web", "uid": "uid-1"},
    "spec": {"initContainers": [{"name": "setup"}], "containers": [{"name": "app"}]},
}


class Recorded:
    def __init__(self) -> None:
        self.events: list[tuple[InvolvedObject, str, str, str]] = []

    def emit(self, involved: InvolvedObject, event_type: str, reason: str, message: str) -> None:
        self.events.append((involved, event_type, reason, message))


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def find(namespace: str, name: str, uid: str | None) -> KubeObject | None:
    return POD if (namespace, name, uid) == ("ns", "web", "uid-1") else None


def test_events_name_the_container_and_are_limited_per_reason() -> None:
    recorded, clock = Recorded(), Clock()
    events = BackendEvents(
        cast(EventRecorder, recorded), find, burst=3, refill_seconds=60, clock=clock
    )
    unhealthy = PodEvent("Warning", "Unhealthy", "Liveness probe failed: sick", "app")
    for _ in range(5):
        events(REF, unhealthy)
    events(REF, PodEvent("Normal", "Killing", "Container app failed liveness probe", "app"))
    events(REF, PodEvent("Warning", "Unhealthy", "Startup probe failed: no", "setup"))
    reasons = [(e[0].field_path, e[2]) for e in recorded.events]
    assert reasons == [
        *[("spec.containers{app}", "Unhealthy")] * 3,
        ("spec.containers{app}", "Killing"),
        ("spec.initContainers{setup}", "Unhealthy"),
    ]
    first = recorded.events[0]
    assert first[0].uid == "uid-1" and first[0].namespace == "ns" and first[0].kind == "Pod"
    assert first[1:] == ("Warning", "Unhealthy", "Liveness probe failed: sick")
    clock.now += 60
    events(REF, unhealthy)
    events(REF, unhealthy)
    assert len(recorded.events) == 6  # one more per refill period


def test_an_event_for_a_pod_not_seen_yet_still_goes_out() -> None:
    recorded = Recorded()
    events = BackendEvents(cast(EventRecorder, recorded), lambda *_: None)
    events(PodRef("ns", "other", "uid-2"), PodEvent("Warning", "Unhealthy", "x", "c"))
    (event,) = recorded.events
    assert event[0].name == "other" and event[0].field_path == "spec.containers{c}"
