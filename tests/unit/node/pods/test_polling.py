"""The status poller makes a backend that cannot push look like one that does."""

from __future__ import annotations

import asyncio

import pytest

from tests.unit.fake_clock import FakeClock
from tests.unit.scripted_backend import PolledBackend, ScriptedBackend
from vkpy.node.pods.polling import StatusPoller, push_or_poll
from vkpy.providers.base import ContainerConfig, PodConfig, PodRef, PodState
from vkpy.providers.errors import NotFoundError, RetryableError


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


async def test_the_controllers_own_reads_count_as_the_last_look() -> None:
    """The controller reads states through the poller: a poll that finds what it read
    wakes nothing, a change after it does, and a pod it found gone stays quiet."""
    clock = FakeClock()
    backend = PolledBackend(clock)
    for uid in ("a", "b"):
        await backend.create_pod(config(uid))
    known = [PodRef("ns", u, u) for u in ("a", "b")]
    poller = StatusPoller(backend, 5.0, lambda: known, clock)
    woken: list[str] = []
    poller.on_status_change(lambda ref: woken.append(ref.uid))
    assert await poller.get_pod_status(known[0]) == backend.states["a"]
    backend.lose("b")
    with pytest.raises(NotFoundError):
        await poller.get_pod_status(known[1])
    await poller.poll()
    assert woken == []
    backend.states["a"] = PodState(phase="Succeeded")
    await poller.poll()
    assert woken == ["a"]


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
    assert push_or_poll(backend, 5.0, clock, list) == (backend, None)
    polled = PolledBackend(clock)
    source, poller = push_or_poll(polled, 5.0, clock, list)
    assert isinstance(poller, StatusPoller) and source is poller
