"""The simulated pod timeline: what each pod is doing at a given moment.

The sim backend keeps, per pod, only a record of when it was created and how it was
asked to behave; everything else (Pending, Running, exited, restarting with
CrashLoopBackOff, which run's logs a query reads) is computed here from that record
and the time, as pure functions. That keeps the simulation deterministic, testable
without waiting, and the same after vkpy restarts.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime

from vkpy.providers.base import ContainerState, LogQuery, PodPhase, PodRef, PodState
from vkpy.providers.errors import NotFoundError
from vkpy.providers.sim.telemetry import Run


@dataclass(frozen=True, slots=True)
class Record:
    """What the platform remembers about one pod (persisted as JSON). Tuples, not lists:
    an empty tuple is shared, and a node set holds one record per pod (issue 30)."""

    namespace: str
    name: str
    uid: str
    created: float
    start_seconds: float
    run_seconds: float | None
    exit_code: int
    restart_policy: str
    containers: tuple[tuple[str, str], ...]
    init_containers: tuple[str, ...]
    log_rate: float = 1.0
    log_width: int = 0
    usage: tuple[tuple[float, int], ...] = ()
    """(CPU cores, memory bytes) per container, in the order of `containers`."""
    ready_delays: tuple[float, ...] = ()
    """Seconds from the start of each run until each container is ready, in the order
    of `containers` (its probes' initial delay; empty: ready as soon as it runs)."""
    sidecars: tuple[str, ...] = ()
    """The init containers that restart Always: they run beside the app containers
    from the start until the pod ends, instead of completing first."""
    sidecar_ready_delays: tuple[float, ...] = ()
    """As `ready_delays`, for `sidecars` (from the pod's start)."""

    @property
    def ref(self) -> PodRef:
        return PodRef(self.namespace, self.name, self.uid)


def container_id(record: Record, name: str, instance: int) -> str:
    """The ID of the `instance`th run (0 first, +1 per restart) of a container: unique
    per pod, container and run, and the same every time it is computed."""
    digest = hashlib.sha256(f"{record.uid}\0{name}\0{instance}".encode()).hexdigest()
    return f"sim://{digest}"


def at(epoch: float) -> datetime:
    return datetime.fromtimestamp(epoch, UTC)


def runs(record: Record, now: float, delay: float) -> tuple[Run | None, Run | None, str | None]:
    """(current run, last terminated run, waiting reason) of the pod's containers at
    `now`, the same lockstep schedule as `state_at`."""
    began = record.created + record.start_seconds
    if now < began:
        return None, None, "ContainerCreating"
    if record.run_seconds is None:
        return Run(began, None, 0), None, None
    if not restarts(record):
        return Run(began, began + record.run_seconds, 0), None, None
    period = record.run_seconds + delay
    k = int((now - began) // period)
    run_start = began + k * period
    last = Run(run_start - period, run_start - delay, k - 1) if k > 0 else None
    if now < run_start + record.run_seconds:
        return Run(run_start, run_start + record.run_seconds, k), last, None
    return None, Run(run_start, run_start + record.run_seconds, k), "CrashLoopBackOff"


def log_run(record: Record, query: LogQuery, now: float, delay: float) -> Run:
    """Which run's logs the query reads, or the kubelet's error for why there is none."""
    name, pod = query.container, record.name
    if name in record.init_containers:
        began = record.created + record.start_seconds
        if now < began or query.previous:
            raise NotFoundError(f'container "{name}" in pod "{pod}" has no logs yet')
        return Run(began, began, 0)
    if name not in {n for n, _ in record.containers}:
        raise NotFoundError(f'container "{name}" in pod "{pod}" is not available')
    current, last, waiting = runs(record, now, delay)
    if query.previous:
        if last is None:
            raise NotFoundError(f'previous terminated container "{name}" in pod "{pod}" not found')
        return last
    if current is not None:
        return current
    if last is not None:
        return last
    raise NotFoundError(f'container "{name}" in pod "{pod}" is waiting to start: {waiting}')


def restarts(record: Record) -> bool:
    if record.restart_policy == "Always":
        return True
    return record.restart_policy == "OnFailure" and record.exit_code != 0


def next_change(record: Record, now: float, delay: float) -> float | None:
    began = record.created + record.start_seconds
    if now < began:
        return began
    current, _, _ = runs(record, now, delay)
    if current is not None:
        upcoming = [current.start + d for d in record.ready_delays if current.start + d > now]
        upcoming += [began + d for d in record.sidecar_ready_delays if began + d > now]
        if current.end is not None:
            upcoming = [t for t in upcoming if t < current.end]
        if upcoming:
            return min(upcoming)
    if record.run_seconds is None:
        return None
    period = record.run_seconds + delay
    if not restarts(record):
        end = began + record.run_seconds
        return end if now < end else None
    k = int((now - began) // period)
    end = began + k * period + record.run_seconds
    return end if now < end else began + (k + 1) * period


def state_at(record: Record, now: float, delay: float) -> PodState:
    """The pod's state at `now`: a pure function of the record and the time."""
    began = record.created + record.start_seconds
    inits = _init_states(record, now, began, None)
    if now < began:
        waiting = tuple(
            ContainerState(name=n, state="waiting", reason="ContainerCreating", image=i)
            for n, i in record.containers
        )
        return PodState(phase="Pending", containers=waiting, started_at=at(record.created))

    ready_after = dict(zip((n for n, _ in record.containers), record.ready_delays, strict=False))

    def ready(n: str, since: float) -> bool:
        return now >= since + ready_after.get(n, 0.0)

    def first_run(n: str, i: str) -> ContainerState:
        return _running(n, i, began, 0, None, container_id(record, n, 0), ready(n, began))

    if record.run_seconds is None:
        return _uniform(record, "Running", inits, first_run)
    period = record.run_seconds + delay
    if not restarts(record):
        end = began + record.run_seconds
        if now < end:
            return _uniform(record, "Running", inits, first_run)
        phase: PodPhase = "Succeeded" if record.exit_code == 0 else "Failed"
        return _uniform(
            record,
            phase,
            _init_states(record, now, began, end),
            lambda n, i: _terminated(
                n, i, record.exit_code, began, end, container_id(record, n, 0)
            ),
        )
    k = int((now - began) // period)
    run_start = began + k * period

    def previous(n: str) -> ContainerState | None:
        if k == 0:
            return None
        cid = container_id(record, n, k - 1)
        return _terminated("", "", record.exit_code, run_start - period, run_start - delay, cid)

    if now < run_start + record.run_seconds:
        return _uniform(
            record,
            "Running",
            inits,
            lambda n, i: _running(
                n, i, run_start, k, previous(n), container_id(record, n, k), ready(n, run_start)
            ),
        )
    finished = run_start + record.run_seconds

    def crashed(n: str) -> ContainerState:
        cid = container_id(record, n, k)
        return _terminated("", "", record.exit_code, run_start, finished, cid)

    return _uniform(
        record,
        "Running",
        inits,
        lambda n, i: ContainerState(
            name=n,
            state="waiting",
            reason="CrashLoopBackOff",
            message=f"back-off {delay:g}s restarting failed container={n}",
            restart_count=k,
            last_terminated=crashed(n),
            image=i,
        ),
    )


def _init_states(
    record: Record, now: float, began: float, ended: float | None
) -> tuple[ContainerState, ...]:
    """The init containers: a regular one completed before the app containers began;
    a sidecar runs from then on (ready after its delay) until the pod `ended`."""
    sidecar_delays = dict(zip(record.sidecars, record.sidecar_ready_delays, strict=False))
    states = []
    for name in record.init_containers:
        cid = container_id(record, name, 0)
        if name in record.sidecars and now >= began:
            if ended is not None:
                states.append(_terminated(name, "", 0, began, ended, cid))
                continue
            ready = now >= began + sidecar_delays.get(name, 0.0)
            states.append(_running(name, "", began, 0, None, cid, ready))
            continue
        states.append(
            ContainerState(
                name=name,
                state="terminated",
                reason="Completed",
                exit_code=0,
                started_at=at(min(now, began)),
                finished_at=at(min(now, began)),
                container_id=cid,
            )
        )
    return tuple(states)


def _uniform(
    record: Record,
    phase: PodPhase,
    inits: tuple[ContainerState, ...],
    make: Callable[[str, str], ContainerState],
) -> PodState:
    """Every container of the pod in the same state (the sim runs them in lockstep)."""
    return PodState(
        phase=phase,
        containers=tuple(make(n, i) for n, i in record.containers),
        init_containers=inits,
        started_at=at(record.created),
    )


def _running(
    name: str,
    image: str,
    since: float,
    restarts: int,
    last: ContainerState | None,
    cid: str,
    ready: bool,
) -> ContainerState:
    return ContainerState(
        name=name,
        state="running",
        started_at=at(since),
        ready=ready,
        restart_count=restarts,
        last_terminated=last,
        image=image,
        container_id=cid,
    )


def _terminated(
    name: str, image: str, code: int, since: float, until: float, cid: str
) -> ContainerState:
    return ContainerState(
        name=name,
        state="terminated",
        reason="Completed" if code == 0 else "Error",
        exit_code=code,
        started_at=at(since),
        finished_at=at(until),
        image=image,
        container_id=cid,
    )
