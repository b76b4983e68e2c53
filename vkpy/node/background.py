"""Runs a backend's long-lived tasks under supervision, inside the runner's task group.

A backend's monitor that ends on an unexpected error must not leave a node that
looks Ready and never reports a status again. So backends declare their long-lived
tasks (`providers.base.BackgroundTask`) and this supervisor runs them: each is named
in the logs, logged with its traceback when it fails, started again with capped
exponential back-off, and while it keeps failing (at once for a critical task) its
error is reported by `problem()`, which the node controller turns into Ready=False.
A task counts as healthy again once it has run for `stable_after` seconds.
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass

from vkpy.core.clock import SYSTEM_CLOCK, Clock
from vkpy.providers.base import BackgroundTask, Provider, RunsTasks

log = logging.getLogger(__name__)


@dataclass
class _State:
    task: BackgroundTask
    failures: int = 0
    error: str | None = None
    running_since: float | None = None


class TaskSupervisor:
    """Runs `BackgroundTask`s until cancelled; see the module docstring."""

    def __init__(
        self,
        *,
        clock: Clock = SYSTEM_CLOCK,
        first_delay: float = 1.0,
        max_delay: float = 60.0,
        unhealthy_after: int = 3,
        stable_after: float = 60.0,
    ) -> None:
        self._clock = clock
        self._first_delay = first_delay
        self._max_delay = max_delay
        self._unhealthy_after = unhealthy_after
        self._stable_after = stable_after
        self._states: dict[str, _State] = {}
        self._group: asyncio.TaskGroup | None = None

    def add(self, task: BackgroundTask) -> None:
        """Supervise `task` (started at once if `run` is running, else when it starts)."""
        if task.name in self._states:
            raise ValueError(f"a background task named {task.name!r} is already supervised")
        state = _State(task)
        self._states[task.name] = state
        if self._group is not None:
            self._group.create_task(self._keep(state), name=task.name)

    def add_from(self, provider: Provider) -> None:
        """Supervise the backend's own tasks, if it has any."""
        if isinstance(provider, RunsTasks):
            for task in provider.background_tasks():
                self.add(task)

    @property
    def empty(self) -> bool:
        """Whether nothing is supervised (most backends: their node needs no task for
        this; a task and its group are about 2.4 KiB, per node in a node set)."""
        return not self._states

    def problem(self) -> str | None:
        """Why the backend's tasks make the node unhealthy now; None when they do not."""
        now = self._clock.monotonic()
        for state in self._states.values():
            if state.error is None:
                continue
            recovered = (
                state.running_since is not None and now - state.running_since >= self._stable_after
            )
            if recovered:
                state.error = None
                state.failures = 0
                continue
            if state.task.critical or state.failures >= self._unhealthy_after:
                return f"backend task {state.task.name} failed: {state.error}"
        return None

    async def run(self) -> None:
        """Run every task until cancelled."""
        async with asyncio.TaskGroup() as group:
            self._group = group
            try:
                for state in self._states.values():
                    group.create_task(self._keep(state), name=state.task.name)
                await asyncio.Event().wait()  # until cancelled
            finally:
                self._group = None

    async def _keep(self, state: _State) -> None:
        name = state.task.name
        while True:
            state.running_since = self._clock.monotonic()
            log.debug("background task started", extra={"task": name})
            try:
                await state.task.run()
                error = "ended"
                log.error("background task ended unexpectedly", extra={"task": name})
            except asyncio.CancelledError:
                log.debug("background task stopped", extra={"task": name})
                raise
            except Exception as failure:
                error = f"{type(failure).__name__}: {failure}"
                log.exception("background task failed", extra={"task": name})
            ran = self._clock.monotonic() - state.running_since
            state.running_since = None
            if ran >= self._stable_after:
                state.failures = 0
            state.failures += 1
            state.error = error
            delay = min(self._max_delay, self._first_delay * 2 ** (state.failures - 1))
            log.warning(
                "restarting background task",
                extra={"task": name, "failures": state.failures, "delay": delay},
            )
            await self._clock.sleep(delay)
