"""What the exec, attach and port-forward endpoints share: settings, the idle watchdog,
metrics, and the rule for turning a backend call into the outcome on the error stream.

Both transports (SPDY/3.1 after an HTTP upgrade, and the WebSocket channel protocols)
end up running the same backend hooks (`ExecProvider`, `AttachProvider`,
`PortForwardProvider`); the rules for when a call starts, how a client that goes away
cancels it, and which Status the client reads at the end are here once.
"""

from __future__ import annotations

import asyncio
import collections
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from aiohttp import web
from prometheus_client import Counter, Gauge

from vkpy.core.cancelling import cancel_and_wait
from vkpy.providers.errors import NotFoundError, ProviderError, UnsupportedError
from vkpy.streams.remotecommand import ExitCode, InternalError, Outcome, Success

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class StreamSettings:
    """Timeouts and buffer bounds of the streaming endpoints (the kubelet's defaults)."""

    stream_creation_timeout: float = 30.0
    """How long the client may take to open the streams it announced (SPDY), or the
    second stream of a port-forward pair, before the request is given up."""
    idle_timeout: float = 4 * 3600.0
    """A connection with no frame or message in either direction for this long is
    closed (the kubelet's streamingConnectionIdleTimeout). Client pings count as
    traffic, so only a client that vanished without closing is affected."""
    close_grace: float = 5.0
    """After the last frame (GOAWAY), how long to wait for the client to hang up before
    the connection is closed anyway. Closing first could reset unread data."""
    max_buffered: int = 1024 * 1024
    """Bytes received and not yet consumed (stdin, port-forward data) at which reading
    from the client pauses until the backend catches up."""
    cancel_timeout: float = 10.0
    """How long a cancelled backend call may take to clean up before it is abandoned
    with an error in the log (it should take milliseconds)."""


STREAM_SETTINGS = web.AppKey("stream_settings", StreamSettings)
"""Optional: the streaming settings of an application (defaults when absent)."""

SESSIONS = Gauge(
    "vkpy_kubelet_stream_sessions_open",
    "Exec, attach and port-forward sessions open now, by kind and transport.",
    ["kind", "transport"],
)
SESSIONS_TOTAL = Counter(
    "vkpy_kubelet_stream_sessions_total",
    "Exec, attach and port-forward sessions, by kind, transport and how they ended "
    "(success, exit_code, error, client_gone, timeout, refused).",
    ["kind", "transport", "outcome"],
)
PORT_FORWARD_CONNECTIONS = Gauge(
    "vkpy_kubelet_port_forward_connections_open",
    "Forwarded connections open now.",
)


def _task_count() -> float:
    try:
        return float(len(asyncio.all_tasks()))
    except RuntimeError:  # no running loop in this thread
        return float("nan")


ASYNCIO_TASKS = Gauge(
    "vkpy_asyncio_tasks",
    "Tasks alive on vkpy's event loop (a leak shows as a count that keeps growing).",
)
ASYNCIO_TASKS.set_function(_task_count)


class IdleTimer:
    """Calls `on_idle` once when `touch` has not been called for `timeout` seconds.

    One timer handle, re-armed lazily: `touch` only records the time, so it costs
    nothing on the data path."""

    def __init__(self, timeout: float, on_idle: Callable[[], None]) -> None:
        self._loop = asyncio.get_running_loop()
        self._timeout = timeout
        self._on_idle = on_idle
        self._last = self._loop.time()
        self._handle: asyncio.TimerHandle | None = None
        if timeout > 0:
            self._handle = self._loop.call_at(self._last + timeout, self._check)

    def touch(self) -> None:
        self._last = self._loop.time()

    def _check(self) -> None:
        due = self._last + self._timeout
        if self._loop.time() >= due:
            self._handle = None
            self._on_idle()
        else:
            self._handle = self._loop.call_at(due, self._check)

    def cancel(self) -> None:
        if self._handle is not None:
            self._handle.cancel()
            self._handle = None


def outcome_of_error(error: BaseException, doing: str) -> InternalError:
    """The error-stream Status for a backend call that raised: a backend's own error
    says what went wrong in its words; anything else is a bug, logged in full, and
    the client reads only what failed (`doing`), never vkpy's internals."""
    if isinstance(error, ProviderError):
        return InternalError(str(error))
    return InternalError(doing)


async def run_backend_call(
    call: Awaitable[int | None],
    client_gone: asyncio.Future[None],
    *,
    what: str,
    cancel_timeout: float,
    exit_codes: bool = True,
    doing: str = "error executing command in container",
) -> Outcome | None:
    """Run one exec/attach backend call until it returns or the client goes away.

    Returns the outcome to report on the error stream, or None when the client went
    away first (the call was then cancelled and has cleaned up). With `exit_codes`
    false (attach) an exit code is not reported, as the kubelet does not.
    """
    task: asyncio.Task[int | None] = asyncio.ensure_future(call)
    task.set_name(what)
    try:
        waiting: set[asyncio.Future[Any]] = {task, client_gone}
        await asyncio.wait(waiting, return_when=asyncio.FIRST_COMPLETED)
    except asyncio.CancelledError:
        await cancel_and_wait(task, timeout=cancel_timeout)
        raise
    if not task.done():
        await cancel_and_wait(task, timeout=cancel_timeout)
        return None
    error = task.exception()
    if error is not None:
        if not isinstance(error, ProviderError):
            log.error("backend stream call crashed", extra={"call": what}, exc_info=error)
        elif not isinstance(error, (NotFoundError, UnsupportedError)):
            log.warning("backend stream call failed", extra={"call": what, "error": str(error)})
        return outcome_of_error(error, doing)
    code = task.result()
    if code is None or code == 0 or not exit_codes:
        return Success()
    return ExitCode(code)


class ByteQueue:
    """Bytes from a client waiting for the backend: one stream's or channel's input.

    `feed` never blocks (it is called from protocol callbacks); producers that can
    wait use `wait_for_room`. `read` returns b"" once `end` was called and everything
    before it was read. `on_consumed` hears of every byte read, so a connection-wide
    budget can resume reading."""

    def __init__(self, on_consumed: Callable[[int], None] | None = None) -> None:
        self._chunks: collections.deque[bytes] = collections.deque()
        self._size = 0
        self._ended = False
        self._discarding = False
        self._readable = asyncio.Event()
        self._room = asyncio.Event()
        self._room.set()
        self._on_consumed = on_consumed

    @property
    def size(self) -> int:
        return self._size

    @property
    def ended(self) -> bool:
        return self._ended

    def feed(self, data: bytes) -> int:
        """Queue `data`; returns how many bytes were taken (0 once ended or discarding)."""
        if self._ended or self._discarding or not data:
            return 0
        self._chunks.append(data)
        self._size += len(data)
        self._readable.set()
        return len(data)

    def end(self) -> None:
        self._ended = True
        self._readable.set()

    def discard(self) -> None:
        """Nobody will read: drop what is queued and everything fed later."""
        self._discarding = True
        self._take_all()
        self.end()

    async def read(self, limit: int = 256 * 1024) -> bytes:
        while not self._chunks:
            if self._ended:
                return b""
            self._readable.clear()
            await self._readable.wait()
        parts: list[bytes] = []
        taken = 0
        while self._chunks and taken < limit:
            chunk = self._chunks.popleft()
            if taken + len(chunk) > limit:
                cut = limit - taken
                self._chunks.appendleft(chunk[cut:])
                chunk = chunk[:cut]
            parts.append(chunk)
            taken += len(chunk)
        self._consumed(taken)
        return b"".join(parts)

    async def wait_for_room(self, limit: int) -> None:
        while self._size > limit and not self._discarding:
            self._room.clear()
            await self._room.wait()

    def _take_all(self) -> None:
        size = self._size
        self._chunks.clear()
        self._consumed(size)

    def _consumed(self, count: int) -> None:
        self._size -= count
        self._room.set()
        if self._on_consumed is not None and count:
            self._on_consumed(count)
