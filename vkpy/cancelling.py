"""Cancelling child tasks without losing the caller's own cancellation.

`task.cancel(); with suppress(CancelledError): await task` is the usual way to stop a
child, and it has a hole: when the caller is itself cancelled while it waits (vkpy
stopping on SIGTERM while a pod stops), the CancelledError it receives is taken for
the child's and suppressed, and the caller carries on as if nothing had happened.
`asyncio.wait` never raises a child's outcome, so a CancelledError out of it is the
caller's own.
"""

from __future__ import annotations

import asyncio
import logging

log = logging.getLogger(__name__)


async def cancel_and_wait(*tasks: asyncio.Task[object] | asyncio.Task[None] | None) -> None:
    """Cancel the tasks and wait until each has ended; a failure is logged, not raised
    (they were being stopped); the caller's own cancellation propagates."""
    pending = {t for t in tasks if t is not None}
    for task in pending:
        task.cancel()
    if not pending:
        return
    try:
        await asyncio.wait(pending)
    finally:
        for task in pending:
            if task.done() and not task.cancelled() and task.exception() is not None:
                log.warning(
                    "task failed while being stopped",
                    extra={"task": task.get_name()},
                    exc_info=task.exception(),
                )
