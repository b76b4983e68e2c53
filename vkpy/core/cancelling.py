"""Cancelling tasks and waiting for them, without losing the caller's own cancellation.

`task.cancel(); with suppress(CancelledError): await task` is the usual way to stop a
child, and it has a hole: when the caller is itself cancelled while it waits (vkpy
stopping on SIGTERM while a pod stops), the CancelledError it receives is taken for
the child's and suppressed, and the caller carries on as if nothing had happened.
`asyncio.wait` never raises a child's outcome, so a CancelledError out of it is the
caller's own. One mechanism for every place that stops tasks: the process backend's
containers and probes, and the kubelet API's backend stream calls (bounded there, so
a backend call that ignores its cancel cannot hold a connection's cleanup).
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

log = logging.getLogger(__name__)


async def cancel_and_wait(*tasks: asyncio.Task[Any] | None, timeout: float | None = None) -> None:
    """Cancel the tasks and wait until each has ended (at most `timeout` seconds, if
    given); a failure is logged, not raised (they were being stopped), and so is a task
    still running at the timeout; the caller's own cancellation propagates."""
    pending = {t for t in tasks if t is not None}
    for task in pending:
        task.cancel()
    if not pending:
        return
    done, running = await asyncio.wait(pending, timeout=timeout)
    for task in running:
        log.error("task did not finish after cancellation", extra={"task": task.get_name()})
    for task in done:
        if not task.cancelled() and task.exception() is not None:
            log.warning(
                "task failed while being stopped",
                extra={"task": task.get_name()},
                exc_info=task.exception(),
            )
