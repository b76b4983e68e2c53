"""A pod's phase from its containers' states, by the kubelet's rules (getPhase).

Pure, so every rule is unit-tested: a failed init container fails a pod that never
restarts and keeps it Pending otherwise; an app container waiting without having run
keeps the pod Pending; one running makes it Running; when all have stopped, the
restart policy decides (Always: Running, they come back; OnFailure: Succeeded when
all exited 0, else Running; Never: Succeeded or Failed). A container waiting in
CrashLoopBackOff has stopped (it has a last termination).
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime

from vkpy.providers.base import ContainerState, PodPhase
from vkpy.providers.process.records import ExitRecord


def at(ns: int | None) -> datetime | None:
    return None if ns is None else datetime.fromtimestamp(ns / 1e9, UTC)


def terminated_state(
    name: str, image: str, record: ExitRecord, restart_count: int
) -> ContainerState:
    return ContainerState(
        name=name,
        state="terminated",
        reason=record.reason,
        message=record.message,
        started_at=at(record.started_ns),
        finished_at=at(record.finished_ns),
        exit_code=record.exit_code,
        signal=record.signal,
        restart_count=restart_count,
        image=image,
        container_id=f"process://{record.pid}" if record.pid else "",
    )


def _init_done(state: ContainerState, sidecar: bool) -> bool:
    if sidecar:
        return state.state == "running" and state.started is not False
    return state.state == "terminated" and state.exit_code == 0


def pod_phase(
    restart_policy: str,
    inits: Sequence[ContainerState],
    sidecars: Sequence[bool],
    apps: Sequence[ContainerState],
    init_failed: bool,
) -> PodPhase:
    """The phase the kubelet would report. `sidecars[i]` marks restartable init containers."""
    if init_failed and restart_policy == "Never":
        return "Failed"
    any_started = any(s.state != "waiting" or s.last_terminated is not None for s in apps)
    initialized = all(_init_done(s, sidecar) for s, sidecar in zip(inits, sidecars, strict=True))
    if not any_started and not initialized:
        return "Pending"
    running = waiting = stopped = succeeded = 0
    for state in apps:
        if state.state == "running":
            running += 1
        elif state.state == "terminated":
            stopped += 1
            if state.exit_code == 0:
                succeeded += 1
        elif state.last_terminated is not None:
            stopped += 1
        else:
            waiting += 1
    if waiting:
        return "Pending"
    if running:
        return "Running"
    if not stopped:
        return "Pending"
    if restart_policy == "Always":
        return "Running"
    if stopped == succeeded:
        return "Succeeded"
    return "Failed" if restart_policy == "Never" else "Running"
