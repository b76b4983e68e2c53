"""A backend whose pods do what the test says, for controller unit tests.

`create_pod` makes a pod Running (all containers running and ready) unless the test
scripted another state; `set_state` changes a pod and pushes the change; `lose`
forgets a pod silently (a backend that lost its state); `fail(op, error)` makes the
next call of `op` raise. Every call is recorded in `calls` as (operation, uid).
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from datetime import UTC, datetime

from vkpy.core.clock import Clock
from vkpy.providers.base import (
    ContainerState,
    NodeInfo,
    NodeResources,
    PodConfig,
    PodRef,
    PodState,
    StatusCallback,
)
from vkpy.providers.errors import NotFoundError


def running(config: PodConfig, at: float, restarts: int = 0) -> PodState:
    started = datetime.fromtimestamp(at, UTC)
    return PodState(
        phase="Running",
        started_at=started,
        pod_ip="10.0.0.7",
        containers=tuple(
            ContainerState(
                name=c.name,
                state="running",
                started_at=started,
                ready=True,
                restart_count=restarts,
                image=c.image,
            )
            for c in config.containers
        ),
    )


class PolledBackend:
    """A backend that cannot push (the controller must poll it)."""

    name = "scripted"
    reads_volume_files = True

    def __init__(self, clock: Clock) -> None:
        self.clock = clock
        self.states: dict[str, PodState] = {}
        self.configs: dict[str, PodConfig] = {}
        self.refs: dict[str, PodRef] = {}
        self.calls: list[tuple[str, str]] = []
        self.errors: dict[str, list[Exception]] = {}
        self.refreshed: list[PodConfig] = []
        self.healthy: Exception | None = None
        self.create_gate: asyncio.Event | None = None
        """When set by a test, `create_pod` waits for it (a slow backend)."""

    # --- test controls ------------------------------------------------------------

    def fail(self, operation: str, error: Exception, times: int = 1) -> None:
        self.errors.setdefault(operation, []).extend([error] * times)

    def count(self, operation: str, uid: str | None = None) -> int:
        return sum(1 for op, u in self.calls if op == operation and uid in (None, u))

    def set_state(self, uid: str, state: PodState) -> None:
        self.states[uid] = state
        self._changed(self.refs[uid])

    def lose(self, uid: str) -> None:
        self.states.pop(uid, None)
        self.configs.pop(uid, None)

    def _changed(self, ref: PodRef) -> None:
        pass

    def _call(self, operation: str, uid: str = "") -> None:
        self.calls.append((operation, uid))
        pending = self.errors.get(operation)
        if pending:
            raise pending.pop(0)

    # --- Provider -----------------------------------------------------------------

    async def start(self) -> None:
        pass

    async def close(self) -> None:
        pass

    def node_info(self) -> NodeInfo:
        return NodeInfo("linux", "amd64", "scripted", "1.0")

    def node_resources(self) -> NodeResources:
        return NodeResources({"cpu": "4", "pods": "110"}, {"cpu": "4", "pods": "110"})

    async def ping(self) -> None:
        self._call("ping")
        if self.healthy is not None:
            raise self.healthy

    async def create_pod(self, pod: PodConfig) -> None:
        self._call("create", pod.ref.uid)
        if self.create_gate is not None:
            await self.create_gate.wait()
        self.configs[pod.ref.uid] = pod
        self.refs[pod.ref.uid] = pod.ref
        self.states[pod.ref.uid] = running(pod, self.clock.time())
        self._changed(pod.ref)

    async def update_pod(self, pod: PodConfig) -> None:
        self._call("update", pod.ref.uid)
        self.configs[pod.ref.uid] = pod

    async def delete_pod(self, ref: PodRef, grace_period: float) -> None:
        self._call("delete", ref.uid)
        if ref.uid not in self.states:
            raise NotFoundError(f"no pod {ref}")
        self.states.pop(ref.uid)
        self.configs.pop(ref.uid, None)
        self._changed(ref)  # its processes ended

    async def get_pod_status(self, ref: PodRef) -> PodState:
        self._call("status", ref.uid)
        state = self.states.get(ref.uid)
        if state is None:
            raise NotFoundError(f"no pod {ref}")
        return state

    async def list_pods(self) -> Sequence[PodRef]:
        self._call("list")
        return [self.refs[uid] for uid in self.states]

    async def refresh_volumes(self, pod: PodConfig) -> None:
        self._call("refresh", pod.ref.uid)
        self.refreshed.append(pod)


class ScriptedBackend(PolledBackend):
    """The same backend, pushing every change it makes."""

    def __init__(self, clock: Clock) -> None:
        super().__init__(clock)
        self._callback: StatusCallback | None = None

    def on_status_change(self, callback: StatusCallback) -> None:
        self._callback = callback

    def _changed(self, ref: PodRef) -> None:
        if self._callback is not None:
            self._callback(ref)
