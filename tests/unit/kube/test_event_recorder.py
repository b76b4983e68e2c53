"""Events: sent from a background task, repeats folded into a count, floods dropped."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable

import pytest
from aiohttp import web

from tests.unit.fake_clock import FakeClock, settle
from tests.unit.fake_kube import FakeKube
from tests.unit.local_api import client_of
from vkpy.kube.client import ApiError
from vkpy.kube.events import NORMAL, WARNING, EventRecorder, InvolvedObject, TokenBucket

POD = InvolvedObject(kind="Pod", name="web", namespace="ns", uid="uid-web")


class Recorder:
    def __init__(self, **options: float) -> None:
        self.kube = FakeKube(FakeClock())
        self.recorder = EventRecorder(self.kube, host="vk-1", **options)  # type: ignore[arg-type]
        self.task = asyncio.create_task(self.recorder.run())


@pytest.fixture
async def recorders() -> AsyncIterator[list[Recorder]]:
    made: list[Recorder] = []
    yield made
    for r in made:
        r.task.cancel()
        await asyncio.gather(r.task, return_exceptions=True)


async def test_repeats_are_folded_into_one_event_with_a_count(
    recorders: list[Recorder],
) -> None:
    r = Recorder()
    recorders.append(r)
    for _ in range(5):
        r.recorder.emit(POD, WARNING, "Failed", 'Error: configmap "settings" not found')
    r.recorder.emit(POD, NORMAL, "Started", "Started container app")
    await settle()
    failed, started = r.kube.events("Failed"), r.kube.events("Started")
    assert [e["count"] for e in failed] == [5]
    assert [e["count"] for e in started] == [1]
    assert failed[0]["involvedObject"] == {
        "kind": "Pod",
        "name": "web",
        "namespace": "ns",
        "uid": "uid-web",
        "apiVersion": "v1",
    }
    assert failed[0]["source"] == {"component": "kubelet", "host": "vk-1"}
    assert len(r.kube.requests_to("POST", "/events$")) == 2


async def test_event_deleted_meanwhile_is_created_again(recorders: list[Recorder]) -> None:
    r = Recorder()
    recorders.append(r)
    r.recorder.emit(POD, WARNING, "Failed", "x")
    await settle()
    (path,) = [p for p in r.kube.objects if "/events/" in p]
    del r.kube.objects[path]
    r.recorder.emit(POD, WARNING, "Failed", "x")
    await settle()
    assert [e["count"] for e in r.kube.events("Failed")] == [1]


async def test_a_flood_is_cut_by_the_token_bucket(recorders: list[Recorder]) -> None:
    r = Recorder(qps=0.001, burst=3)
    recorders.append(r)
    for n in range(10):
        r.recorder.emit(POD, NORMAL, "Pulled", f"image {n}")
    await settle()
    assert len(r.kube.events()) == 3


async def test_api_errors_lose_one_event_not_the_recorder(recorders: list[Recorder]) -> None:
    r = Recorder()
    recorders.append(r)
    r.kube.fail("POST", "/events$", ApiError(500, "InternalError", "etcd"))
    r.kube.fail("POST", "/events$", ApiError(0, "Unreachable", "reset"))
    r.kube.fail("POST", "/events$", ApiError(403, "Forbidden", "no"))
    for n in range(4):
        r.recorder.emit(POD, NORMAL, "Pulled", f"image {n}")
    await settle()
    assert [e["message"] for e in r.kube.events()] == ["image 3"]
    assert not r.task.done()


async def test_a_full_queue_drops_instead_of_blocking(recorders: list[Recorder]) -> None:
    kube = FakeKube(FakeClock())
    recorder = EventRecorder(kube, host="vk-1", queue_size=2)  # type: ignore[arg-type]
    for n in range(5):
        recorder.emit(POD, NORMAL, "Pulled", f"image {n}")  # nothing sends yet
    await recorder.flush()
    assert sorted(e["message"] for e in kube.events()) == ["image 0", "image 1"]


async def test_an_event_carries_the_time_it_happened_not_the_time_it_was_sent() -> None:
    """Events wait for the node's pod work (ElasticGate), seconds in a burst: `kubectl
    describe` must still show when a container started, as the kubelet's do."""
    kube = FakeKube(FakeClock())
    now = [1_800_000_000.0]
    recorder = EventRecorder(kube, host="vk-1", clock=lambda: now[0])  # type: ignore[arg-type]
    recorder.emit(POD, NORMAL, "Started", "Started container app")
    now[0] += 60
    recorder.emit(POD, NORMAL, "Started", "Started container app")
    now[0] += 60  # both sent now
    await recorder.flush()
    (event,) = kube.events("Started")
    assert (event["firstTimestamp"], event["lastTimestamp"], event["count"]) == (
        "2027-01-15T08:00:00Z",
        "2027-01-15T08:01:00Z",
        2,
    )


def test_token_bucket_refills_with_time() -> None:
    now = [0.0]
    bucket = TokenBucket(rate=2, burst=2, clock=lambda: now[0])
    assert [bucket.take() for _ in range(3)] == [True, True, False]
    now[0] += 0.5
    assert [bucket.take() for _ in range(2)] == [True, False]


async def test_an_event_waits_for_the_pods_status_writes_queued_with_it() -> None:
    """Issue 30, a burst of 1000 pods on a fresh cluster: the recorder's one Event in
    flight held one of the node's 4 turns for the whole burst. With the real client
    (one request in flight) against a local stand-in API server: an Event emitted
    before three status patches reaches the server after them."""
    release = asyncio.Event()
    arrived: list[str] = []

    async def handle(request: web.Request) -> web.Response:
        if request.path.endswith("/busy"):
            await release.wait()
            return web.json_response({})
        arrived.append(f"{request.method} {request.path.rsplit('/', 2)[-2]}")
        return web.json_response({}, status=201 if request.method == "POST" else 200)

    async with client_of(handle, max_connections=1) as client:
        recorder = EventRecorder(client, host="vk-1")
        sending = asyncio.create_task(recorder.run())
        busy = asyncio.create_task(client.get("/api/v1/busy"))
        await asyncio.sleep(0.05)  # the one turn is taken
        recorder.emit(POD, NORMAL, "Started", "Started container app")
        await asyncio.sleep(0.05)  # the Event waits for a turn
        statuses = [
            asyncio.create_task(
                client.patch(f"/api/v1/namespaces/ns/pods/p{i}/status", {"status": {}})
            )
            for i in range(3)
        ]
        await asyncio.sleep(0.05)
        release.set()
        await asyncio.gather(busy, *statuses)
        await eventually(lambda: len(arrived) == 4)
        sending.cancel()
        await asyncio.gather(sending, return_exceptions=True)
    assert arrived == ["PATCH p0", "PATCH p1", "PATCH p2", "POST ns"]


async def eventually(check: Callable[[], bool], timeout: float = 5.0) -> None:
    async with asyncio.timeout(timeout):
        while not check():
            await asyncio.sleep(0.01)
