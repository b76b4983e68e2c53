"""The status poller makes a backend that cannot push look like one that does."""

from __future__ import annotations

import asyncio

from tests.unit.fake_clock import FakeClock
from tests.unit.scripted_backend import PolledBackend, ScriptedBackend
from vkpy.node.pods.polling import StatusPoller, pushing
from vkpy.providers.base import ContainerConfig, PodConfig, PodRef, PodState
from vkpy.providers.errors import RetryableError


def config(uid: str) -> PodConfig:
    return PodConfig(
        ref=PodRef("ns", uid, uid),
        pod={},
        init_containers=(),
        containers=(ContainerConfig("app", "img", (), ()),),
    )


async def test_calls_back_for_changed_and_vanished_pods_only() -> None:
    clock = FakeClock()
    backend = PolledBackend(clock)
    for uid in ("a", "b", "c"):
        await backend.create_pod(config(uid))
    known = [PodRef("ns", u, u) for u in ("a", "b", "c")]
    poller = StatusPoller(backend, 5.0, lambda: known, clock)
    woken: list[str] = []
    poller.on_status_change(lambda ref: woken.append(ref.uid))
    await poller.poll()
    assert sorted(woken) == ["a", "b", "c"]  # first look
    woken.clear()
    await poller.poll()
    assert woken == []
    backend.states["a"] = PodState(phase="Succeeded")
    backend.lose("b")
    await poller.poll()
    await poller.poll()
    assert sorted(woken) == ["a", "b"]


async def test_a_failing_look_is_tried_at_the_next_interval() -> None:
    clock = FakeClock()
    backend = PolledBackend(clock)
    await backend.create_pod(config("a"))
    poller = StatusPoller(backend, 5.0, lambda: [PodRef("ns", "a", "a")], clock)
    woken: list[str] = []
    poller.on_status_change(lambda ref: woken.append(ref.uid))
    backend.fail("status", RetryableError("throttled"))
    task = asyncio.create_task(poller.run())
    await clock.advance(5)
    assert woken == []
    await clock.advance(5)
    assert woken == ["a"]
    task.cancel()
    await asyncio.gather(task, return_exceptions=True)


def test_a_pushing_backend_is_used_as_it_is() -> None:
    clock = FakeClock()
    backend = ScriptedBackend(clock)
    assert pushing(backend, 5.0, clock, list) == (backend, None)
    polled = PolledBackend(clock)
    source, poller = pushing(polled, 5.0, clock, list)
    assert isinstance(poller, StatusPoller) and source is poller
