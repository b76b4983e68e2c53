"""The sim backend's clock-driven pods, persistence and fault injection."""

import tracemalloc
from pathlib import Path

import pytest

from tests.unit.fake_clock import FakeClock
from vkpy.providers.base import ContainerConfig, PodConfig, PodRef
from vkpy.providers.errors import InvalidInputError, NotFoundError, RetryableError
from vkpy.providers.sim import SimConfig, SimProvider
from vkpy.providers.sim.timeline import Record, state_at


def config(uid: str = "u1", restart: str = "Never", **annotations: str) -> PodConfig:
    pod = {
        "metadata": {
            "name": "p",
            "namespace": "ns",
            "uid": uid,
            "annotations": {
                f"sim.vkpy.io/{k.replace('_', '-')}": v for k, v in annotations.items()
            },
        },
        "spec": {"restartPolicy": restart},
    }
    return PodConfig(
        ref=PodRef("ns", "p", uid),
        pod=pod,
        init_containers=(),
        containers=(ContainerConfig(name="app", image="img", command=(), args=()),),
    )


async def test_pod_runs_then_exits_with_its_code() -> None:
    clock = FakeClock()
    sim = SimProvider(SimConfig(), clock)
    await sim.start()
    await sim.create_pod(config(run_seconds="0.2", exit_code="3"))
    state = await sim.get_pod_status(PodRef("ns", "p", "u1"))
    assert state.phase == "Running"
    assert state.containers[0].state == "running"
    await clock.advance(0.3)
    state = await sim.get_pod_status(PodRef("ns", "p", "u1"))
    assert state.phase == "Failed"
    assert state.containers[0].exit_code == 3
    await sim.close()


async def test_start_latency_keeps_pod_pending() -> None:
    sim = SimProvider(SimConfig(start_seconds=30))
    await sim.start()
    await sim.create_pod(config())
    state = await sim.get_pod_status(PodRef("ns", "p", "u1"))
    assert state.phase == "Pending"
    assert state.containers[0].reason == "ContainerCreating"
    await sim.close()


async def test_restart_policy_always_counts_restarts() -> None:
    clock = FakeClock()
    sim = SimProvider(SimConfig(restart_delay=5), clock)
    await sim.start()
    await sim.create_pod(config(restart="Always", run_seconds="5", exit_code="1"))
    await clock.advance(35)
    state = await sim.get_pod_status(PodRef("ns", "p", "u1"))
    assert state.phase == "Running"
    assert state.containers[0].restart_count >= 2
    assert state.containers[0].last_terminated is not None
    await sim.close()


async def test_pushes_status_changes() -> None:
    clock = FakeClock()
    sim = SimProvider(SimConfig(), clock)
    seen: list[float] = []
    sim.on_status_change(lambda ref: seen.append(clock.time() - start))
    start = clock.time()
    await sim.start()
    await sim.create_pod(config(run_seconds="10"))
    await clock.advance(60)
    assert [round(t) for t in seen] == [0, 10]  # created, then exited (and no more)
    await sim.close()


async def test_records_survive_a_restart_of_the_backend(tmp_path: Path) -> None:
    first = SimProvider(SimConfig(state_dir=str(tmp_path)))
    await first.start()
    await first.create_pod(config())
    await first.close()
    second = SimProvider(SimConfig(state_dir=str(tmp_path)))
    await second.start()
    assert [r.uid for r in await second.list_pods()] == ["u1"]
    await second.delete_pod(PodRef("ns", "p", "u1"), 0)
    assert await second.list_pods() == []
    with pytest.raises(NotFoundError):
        await second.get_pod_status(PodRef("ns", "p", "u1"))
    await second.close()


async def test_bad_annotation_is_invalid_input() -> None:
    sim = SimProvider(SimConfig())
    await sim.start()
    with pytest.raises(InvalidInputError, match="not a number"):
        await sim.create_pod(config(exit_code="three"))
    await sim.close()


async def test_failure_rate_injects_retryable_errors() -> None:
    sim = SimProvider(SimConfig(failure_rate=0.5, seed=1))
    await sim.start()
    outcomes = []
    for n in range(40):
        try:
            await sim.create_pod(config(uid=f"u{n}"))
            outcomes.append("ok")
        except RetryableError:
            outcomes.append("retry")
    assert 5 < outcomes.count("retry") < 35
    await sim.close()


def test_config_rejects_unknown_settings() -> None:
    with pytest.raises(ValueError, match="unknown sim settings: bogus"):
        SimConfig.from_dict({"bogus": 1}, state_dir=None)


def _record(uid: str, run_seconds: float | None, restart: str = "Never") -> Record:
    return Record(
        namespace="ns",
        name=f"pod-{uid}",
        uid=uid,
        created=1000.0,
        start_seconds=0.0,
        run_seconds=run_seconds,
        exit_code=1,
        restart_policy=restart,
        containers=(("app", "img"), ("side", "img")),
        init_containers=("setup",),
    )


def test_container_ids_are_unique_per_container_instance() -> None:
    ids = []
    for uid in ("u1", "u2"):
        state = state_at(_record(uid, None), 1001.0, 1.0)
        ids += [c.container_id for c in state.containers + state.init_containers]
    assert all(i.startswith("sim://") for i in ids)
    assert len(set(ids)) == 6
    assert state_at(_record("u1", None), 5000.0, 1.0).containers[0].container_id == ids[0]

    crashing = _record("u3", 1.0, restart="Always")
    first = state_at(crashing, 1000.5, 1.0).containers[0]
    second = state_at(crashing, 1002.5, 1.0).containers[0]
    assert second.restart_count == 1
    assert second.container_id != first.container_id
    assert second.last_terminated is not None
    assert second.last_terminated.container_id == first.container_id
    waiting = state_at(crashing, 1001.5, 1.0).containers[0]
    assert waiting.last_terminated is not None
    assert waiting.last_terminated.container_id == first.container_id


async def test_a_finite_run_setting_ends_only_pods_that_do_not_restart_forever() -> None:
    """`finite_run_seconds`: a container of a Never/OnFailure pod is a program that
    finishes (exit 0 after that time, the pod Succeeded); an Always pod's containers
    still run until deleted, and a pod's own run-seconds annotation still wins."""
    clock = FakeClock()
    sim = SimProvider(SimConfig(finite_run_seconds=2), clock)
    await sim.start()
    await sim.create_pod(config(uid="never", restart="Never"))
    await sim.create_pod(config(uid="onfailure", restart="OnFailure"))
    await sim.create_pod(config(uid="always", restart="Always"))
    await sim.create_pod(config(uid="annotated", restart="Never", run_seconds="forever"))
    for uid in ("never", "onfailure"):
        assert (await sim.get_pod_status(PodRef("ns", "p", uid))).phase == "Running"
    await clock.advance(3)
    for uid in ("never", "onfailure"):
        state = await sim.get_pod_status(PodRef("ns", "p", uid))
        assert state.phase == "Succeeded"
        assert state.containers[0].state == "terminated"
        assert state.containers[0].reason == "Completed"
        assert state.containers[0].exit_code == 0
    for uid in ("always", "annotated"):
        state = await sim.get_pod_status(PodRef("ns", "p", uid))
        assert state.phase == "Running"
        assert state.containers[0].state == "running"
    await sim.close()


def test_finite_run_seconds_is_a_setting() -> None:
    assert SimConfig.from_dict({"finite_run_seconds": 2}, state_dir=None).finite_run_seconds == 2
    assert SimConfig().finite_run_seconds is None


def probed(uid: str, **probes: object) -> PodConfig:
    pod = config(uid=uid, restart="Always")
    spec = {"name": "app", "image": "img", **probes}
    app = ContainerConfig(name="app", image="img", command=(), args=(), spec=spec)
    return PodConfig(ref=pod.ref, pod=pod.pod, init_containers=(), containers=(app,))


async def test_probe_delays_hold_a_container_not_ready_until_its_first_probe() -> None:
    """`probe_delays`: a running container is ready once its readiness (or startup)
    probe's initialDelaySeconds have passed, as when the kubelet's first probe
    succeeds; the node hears of the change without being asked."""
    clock = FakeClock()
    sim = SimProvider(SimConfig(probe_delays=True), clock)
    changes: list[float] = []
    start = clock.time()
    sim.on_status_change(lambda ref: changes.append(round(clock.time() - start)))
    await sim.start()
    await sim.create_pod(probed("ready", readinessProbe={"initialDelaySeconds": 20}))
    await sim.create_pod(probed("started", startupProbe={"initialDelaySeconds": 5}))
    await sim.create_pod(probed("plain"))
    ready = PodRef("ns", "p", "ready")
    state = await sim.get_pod_status(ready)
    assert state.containers[0].state == "running"
    assert state.containers[0].ready is False
    assert (await sim.get_pod_status(PodRef("ns", "p", "plain"))).containers[0].ready is True
    await clock.advance(6)
    assert (await sim.get_pod_status(PodRef("ns", "p", "started"))).containers[0].ready is True
    assert (await sim.get_pod_status(ready)).containers[0].ready is False
    await clock.advance(15)
    state = await sim.get_pod_status(ready)
    assert state.containers[0].ready is True
    assert state.containers[0].restart_count == 0
    assert 20 in changes
    await sim.close()


async def test_without_probe_delays_a_running_container_is_ready_at_once() -> None:
    sim = SimProvider(SimConfig(), FakeClock())
    await sim.start()
    await sim.create_pod(probed("ready", readinessProbe={"initialDelaySeconds": 20}))
    assert (await sim.get_pod_status(PodRef("ns", "p", "ready"))).containers[0].ready is True
    await sim.close()


async def test_a_sidecar_init_container_runs_beside_the_app_until_the_pod_completes() -> None:
    """An init container with restartPolicy Always (a sidecar) is not a step that
    completes: it runs beside the app containers (ready after its probe's initial
    delay with `probe_delays`) and ends with them; a regular init container completes."""
    clock = FakeClock()
    sim = SimProvider(SimConfig(finite_run_seconds=30, probe_delays=True), clock)
    await sim.start()
    base = config(uid="side", restart="Never")
    sidecar = ContainerConfig(
        name="proxy",
        image="img",
        command=(),
        args=(),
        spec={
            "name": "proxy",
            "restartPolicy": "Always",
            "readinessProbe": {"initialDelaySeconds": 5},
        },
    )
    setup = ContainerConfig(name="setup", image="img", command=(), args=(), spec={"name": "setup"})
    await sim.create_pod(
        PodConfig(
            ref=base.ref, pod=base.pod, init_containers=(setup, sidecar), containers=base.containers
        )
    )
    ref = PodRef("ns", "p", "side")
    inits = {c.name: c for c in (await sim.get_pod_status(ref)).init_containers}
    assert inits["setup"].state == "terminated" and inits["setup"].reason == "Completed"
    assert inits["proxy"].state == "running"
    assert inits["proxy"].ready is False
    await clock.advance(6)
    inits = {c.name: c for c in (await sim.get_pod_status(ref)).init_containers}
    assert inits["proxy"].state == "running" and inits["proxy"].ready is True
    await clock.advance(30)
    state = await sim.get_pod_status(ref)
    assert state.phase == "Succeeded"
    proxy = {c.name: c for c in state.init_containers}["proxy"]
    assert proxy.state == "terminated" and proxy.exit_code == 0
    await sim.close()


def test_a_node_sets_sims_cost_under_a_kib_each() -> None:
    """A node set of 1000 sim nodes builds 1000 SimProviders; each held a random
    generator of its own (2.5 KiB of Mersenne Twister state, issue 30's tracemalloc
    profile) though only a `seed` makes its failures reproducible."""
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        sims = [SimProvider(SimConfig(failure_rate=0.1)) for _ in range(200)]
        per_sim = (tracemalloc.get_traced_memory()[0] - before) / len(sims)
    finally:
        tracemalloc.stop()
    assert per_sim < 1024, f"{per_sim:.0f} bytes per sim"


async def test_the_same_seed_fails_the_same_calls() -> None:
    async def outcomes() -> list[bool]:
        sim = SimProvider(SimConfig(failure_rate=0.5, seed=7))
        await sim.start()
        out = []
        for n in range(30):
            try:
                await sim.create_pod(config(uid=f"u{n}"))
                out.append(True)
            except RetryableError:
                out.append(False)
        await sim.close()
        return out

    assert await outcomes() == await outcomes()


async def test_a_running_sim_pod_costs_under_half_a_kib() -> None:
    """1000 sim nodes with 10 pods each hold 10,000 records: with a list per field and
    a dict of every container's (empty) environment, each was about 0.8 KiB
    (tracemalloc, issue 30)."""
    sim = SimProvider(SimConfig())
    await sim.start()
    configs = [config(uid=f"{n:08d}-0000-0000-0000-000000000000") for n in range(200)]
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        for one in configs:
            await sim.create_pod(one)
        per_pod = (tracemalloc.get_traced_memory()[0] - before) / len(configs)
    finally:
        tracemalloc.stop()
    state = await sim.get_pod_status(configs[-1].ref)
    assert state.phase == "Running"
    assert per_pod < 512, f"{per_pod:.0f} bytes per pod"
    await sim.close()
