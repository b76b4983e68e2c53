"""Status keeps being written while a pod is being stopped.

A graceful deletion can take the whole grace period (30 s by default), and the
kubelet keeps reporting the pod meanwhile: its readiness probes still run, so a
container that stops serving turns Ready false and endpoints drop it before it is
gone. The pod controller works on one pod at a time, so while it waits for the
backend to stop a pod no status would be written; `stop_reporting` waits for the
stop and, every `interval` until it is done, calls `report` (read the backend's
state, write the status). A failed report is logged and the wait goes on: the stop
is what matters.

Once stopped, the pod's last state as the backend knew it is written once more
(`terminal`): a pod that a finalizer keeps shows its containers terminated and a
terminal phase, as a kubelet's does, rather than running forever.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable, Coroutine
from dataclasses import replace
from typing import Any

from vkpy.core.clock import Clock
from vkpy.providers.base import PodState

log = logging.getLogger(__name__)

REPORT_INTERVAL = 1.0
"""Seconds between status reports while a pod is stopping."""


async def stop_reporting(
    stop: Coroutine[Any, Any, None],
    report: Callable[[], Awaitable[None]],
    clock: Clock,
    interval: float = REPORT_INTERVAL,
) -> None:
    """Run `stop` to its end (its errors are raised), reporting every `interval`.

    The wait is one future woken by the stop's end or by a timer: no sleeping task
    and no `asyncio.wait` per pod, which showed in a deletion burst's profile."""
    stopping = asyncio.ensure_future(stop)
    loop = asyncio.get_running_loop()
    try:
        while not stopping.done():
            woken: asyncio.Future[None] = loop.create_future()

            def wake(_: object = None, woken: asyncio.Future[None] = woken) -> None:
                if not woken.done():
                    woken.set_result(None)

            timer = clock.call_later(interval, wake)
            stopping.add_done_callback(wake)
            try:
                await woken
            finally:
                timer.cancel()
                stopping.remove_done_callback(wake)
            if stopping.done():
                break
            try:
                await report()
            except Exception as error:
                log.warning("status report while stopping failed", extra={"error": str(error)})
    except BaseException:
        stopping.cancel()
        with contextlib.suppress(asyncio.CancelledError, Exception):
            await stopping
        raise
    await stopping


def terminal(state: PodState) -> PodState:
    """A deleted pod's last state as the kubelet reports it: once none of its
    containers runs, Succeeded when every one exited 0, else Failed."""
    containers = state.containers
    if not containers or any(c.state != "terminated" for c in containers):
        return state
    if state.phase in ("Succeeded", "Failed"):
        return state
    succeeded = all(c.exit_code == 0 for c in containers)
    return replace(state, phase="Succeeded" if succeeded else "Failed")
