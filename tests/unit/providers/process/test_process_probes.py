"""Probe timing fields, thresholds and initial results as the kubelet has them."""

import asyncio
import itertools
import time

from vkpy.providers.process.actions import Outcome, resolve_port
from vkpy.providers.process.probes import ProbeSpec, ProbeTracker, container_probes, run_probe

HANDLER = {"exec": {"command": ["true"]}}


def test_defaults_and_minimums() -> None:
    spec = ProbeSpec.parse("readiness", dict(HANDLER))
    assert (spec.initial_delay, spec.period, spec.timeout) == (0, 10, 1)
    assert (spec.success_threshold, spec.failure_threshold) == (1, 3)
    odd = ProbeSpec.parse(
        "liveness",
        {
            **HANDLER,
            "periodSeconds": 0,
            "timeoutSeconds": 0,
            "successThreshold": 5,
            "failureThreshold": 2,
            "initialDelaySeconds": 7,
            "terminationGracePeriodSeconds": 3,
        },
    )
    assert (odd.period, odd.timeout, odd.initial_delay) == (1, 1, 7)
    assert odd.success_threshold == 1  # liveness and startup: always 1
    assert odd.failure_threshold == 2
    assert odd.termination_grace == 3
    assert ProbeSpec.parse("readiness", {**HANDLER, "successThreshold": 2}).success_threshold == 2
    assert odd.handler == HANDLER


def test_container_probes_by_kind() -> None:
    probes = container_probes({"livenessProbe": HANDLER, "startupProbe": HANDLER})
    assert sorted(probes) == ["liveness", "startup"]


def test_readiness_starts_failed_and_needs_its_successes() -> None:
    tracker = ProbeTracker(
        ProbeSpec("readiness", HANDLER, success_threshold=2, failure_threshold=2)
    )
    assert tracker.result is False
    assert not tracker.record(True)
    assert tracker.record(True) and tracker.passing
    assert not tracker.record(False)
    assert tracker.passing
    assert tracker.record(False) and not tracker.passing
    assert not tracker.record(False)


def test_liveness_starts_passing_and_fails_at_the_threshold() -> None:
    tracker = ProbeTracker(ProbeSpec("liveness", HANDLER, failure_threshold=3))
    assert tracker.passing
    assert not tracker.record(False)
    assert not tracker.record(True)  # a success resets the count
    assert not tracker.record(False)
    assert not tracker.record(False)
    assert tracker.record(False, "boom")
    assert tracker.result is False and tracker.last_message == "boom"


def test_startup_is_unknown_until_it_passes_or_fails() -> None:
    passing = ProbeTracker(ProbeSpec("startup", HANDLER, failure_threshold=2))
    assert passing.result is None
    assert not passing.record(False)
    assert passing.record(True) and passing.passing
    failing = ProbeTracker(ProbeSpec("startup", HANDLER, failure_threshold=2))
    failing.record(False)
    assert failing.record(False) and failing.result is False


async def test_run_probe_waits_the_initial_delay_then_probes_every_period() -> None:
    spec = ProbeSpec("startup", HANDLER, initial_delay=0.2, period=0.05, failure_threshold=10)
    tracker = ProbeTracker(spec)
    attempts: list[float] = []
    changes: list[bool | None] = []

    async def attempt(_: ProbeSpec) -> Outcome:
        attempts.append(time.monotonic())
        return Outcome(len(attempts) >= 3)

    began = time.monotonic()
    await asyncio.wait_for(
        run_probe(tracker, attempt, lambda t: changes.append(t.result), began), 5
    )
    assert attempts[0] - began >= 0.19
    assert len(attempts) == 3  # a startup probe stops once it passed
    assert all(b - a >= 0.045 for a, b in itertools.pairwise(attempts))
    assert changes == [True]


def test_named_and_numbered_ports() -> None:
    container = {"ports": [{"name": "http", "containerPort": 8080}]}
    assert resolve_port(80, container) == 80
    assert resolve_port("81", container) == 81
    assert resolve_port("http", container) == 8080
    assert resolve_port("grpc", container) is None
