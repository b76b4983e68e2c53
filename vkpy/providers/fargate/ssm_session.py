"""The Session Manager data channel on aiohttp's WebSocket client: the asyncio side
of `vkpy.streams.ssm_channel`, used by ECS Exec.

It opens the WebSocket to the session's stream URL and presents the token, answers
the agent's handshake, acknowledges and orders what the agent sends, resends input
until the agent acknowledges it (waiting while a window of messages is
unacknowledged, or while the agent paused publication), and, as the reference
client does, reconnects when the connection drops: it asks for a fresh token
(`ssm:ResumeSession`, through `resume`), opens the WebSocket again, presents the
token and resends what is unacknowledged. No token means the session expired.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass

import aiohttp

from vkpy.core.clock import SYSTEM_CLOCK, Clock
from vkpy.providers.errors import ProviderError
from vkpy.streams import ssm_channel
from vkpy.streams.ssm_channel import ChannelEndpoint, PayloadType

log = logging.getLogger(__name__)

CLIENT_VERSION = "vkpy-1"
RESEND_INTERVAL = 0.1
RECONNECT_ATTEMPTS = 5
RECONNECT_FIRST_DELAY = 0.1
RECONNECT_MAX_DELAY = 5.0
OUTPUT_BACKLOG = 256
"""Output messages held for a slow client before the channel stops reading (and so
stops acknowledging, which holds the agent back)."""


class SessionEnded(ProviderError):
    """The data channel cannot go on (expired session, refused token, no agent)."""

    reason = "ExecSessionEnded"


@dataclass(frozen=True)
class Session:
    """What ExecuteCommand returned: the session, its stream URL and its token."""

    session_id: str
    stream_url: str
    token: str

    def __repr__(self) -> str:  # never show the token
        return f"Session({self.session_id!r}, {self.stream_url!r})"


Resume = Callable[[], Awaitable[str | None]]
"""A fresh token for the session (ssm:ResumeSession), or None once it expired."""


class DataChannel:
    """One session's data channel. Use as `async with`; read `output()`, call `send`."""

    def __init__(
        self,
        http: aiohttp.ClientSession,
        session: Session,
        resume: Resume,
        clock: Clock = SYSTEM_CLOCK,
    ) -> None:
        self._http = http
        self._session = session
        self._resume = resume
        self._clock = clock
        self._client_id = str(uuid.uuid4())
        self._state = ChannelEndpoint(
            sends=ssm_channel.INPUT_STREAM_DATA,
            clock_ms=lambda: int(self._clock.time() * 1000),
        )
        self._ws: aiohttp.ClientWebSocketResponse | None = None
        self._token = session.token
        self._changed = asyncio.Event()
        self._ready = asyncio.Event()
        self._events: asyncio.Queue[ssm_channel.Delivered | ssm_channel.Closed | BaseException] = (
            asyncio.Queue()
        )
        self._drained = asyncio.Event()
        self._tasks: list[asyncio.Task[None]] = []
        self.session_type: str | None = None
        self.refused = 0
        """Messages dropped for a bad digest or a malformed header (then resent)."""
        self.reconnects = 0
        self.closed = False
        """The agent closed the channel (`channel_closed`)."""
        self.closed_output = ""
        """The note of its `channel_closed`."""

    async def __aenter__(self) -> DataChannel:
        await self._connect()
        self._tasks = [
            asyncio.create_task(self._read(), name=f"ssm-read-{self._session.session_id}"),
            asyncio.create_task(self._resend(), name=f"ssm-resend-{self._session.session_id}"),
        ]
        return self

    async def __aexit__(self, *exc: object) -> None:
        for task in self._tasks:
            task.cancel()
        for task in self._tasks:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
        if self._ws is not None:
            await self._ws.close()

    async def _connect(self) -> None:
        try:
            self._ws = await self._http.ws_connect(self._session.stream_url, heartbeat=None)
        except (aiohttp.ClientError, OSError) as error:
            raise SessionEnded(f"cannot reach the Session Manager endpoint: {error}") from error
        opening = ssm_channel.open_data_channel(
            self._token, self._client_id, str(uuid.uuid4()), CLIENT_VERSION
        )
        await self._ws.send_str(opening)

    async def _flush(self) -> None:
        ws = self._ws
        for data in self._state.take_outbox():
            if ws is None or ws.closed:
                return  # resent after the reconnect
            with contextlib.suppress(ConnectionError, aiohttp.ClientError):
                await ws.send_bytes(data)

    async def _read(self) -> None:
        try:
            while True:
                while self._events.qsize() >= OUTPUT_BACKLOG:
                    self._drained.clear()
                    await self._drained.wait()
                assert self._ws is not None
                message = await self._ws.receive()
                if message.type == aiohttp.WSMsgType.BINARY:
                    if await self._handle(message.data):
                        return
                elif message.type == aiohttp.WSMsgType.TEXT:
                    log.debug("text message on the data channel ignored")
                elif message.type in (aiohttp.WSMsgType.CLOSE, aiohttp.WSMsgType.CLOSING):
                    reason = f"{message.data} {message.extra or ''}".strip()
                    if not self._ready.is_set():  # refused at the open: no point resuming
                        raise SessionEnded(f"Session Manager refused the data channel: {reason}")
                    await self._reconnect(f"closed by the endpoint: {reason}")
                else:  # CLOSED, ERROR: the connection dropped
                    await self._reconnect("connection lost")
        except BaseException as error:
            self._events.put_nowait(error)
            raise

    async def _handle(self, data: bytes) -> bool:
        for event in self._state.receive(data, self._clock.monotonic()):
            if isinstance(event, ssm_channel.Refused):
                self.refused += 1
                log.warning("data channel message dropped", extra={"reason": event.reason})
            elif isinstance(event, ssm_channel.Closed):
                await self._flush()
                self._events.put_nowait(event)
                return True
            elif isinstance(event, ssm_channel.Paused):
                self._changed.set()
            elif event.payload_type == PayloadType.HANDSHAKE_REQUEST:
                await self._handshake(event.payload)
            elif event.payload_type == PayloadType.HANDSHAKE_COMPLETE:
                self._ready.set()
            else:
                self._events.put_nowait(event)
        self._changed.set()
        await self._flush()
        return False

    async def _handshake(self, payload: bytes) -> None:
        try:
            request = json.loads(payload)
            actions = list(request.get("RequestedClientActions") or [])
        except (ValueError, AttributeError, TypeError):
            actions = []
        response, self.session_type = ssm_channel.handshake_response(CLIENT_VERSION, actions)
        self._state.send_stream(PayloadType.HANDSHAKE_RESPONSE, response, self._clock.monotonic())

    async def _reconnect(self, why: str) -> None:
        log.warning(
            "data channel dropped, resuming the session",
            extra={"session": self._session.session_id, "why": why},
        )
        if self._ws is not None:
            with contextlib.suppress(Exception):
                await self._ws.close()
        delay = RECONNECT_FIRST_DELAY
        last: Exception | None = None
        for _ in range(RECONNECT_ATTEMPTS):
            try:
                token = await self._resume()
            except ProviderError as error:
                last = error
            else:
                if token is None:
                    raise SessionEnded(
                        f"the ECS Exec session {self._session.session_id} expired "
                        "(Session Manager gave no token to resume it); run the command again"
                    )
                self._token = token
                try:
                    await self._connect()
                except SessionEnded as error:
                    last = error
                else:
                    self.reconnects += 1
                    self._state.resend_all(self._clock.monotonic())
                    await self._flush()
                    return
            await self._clock.sleep(delay)
            delay = min(delay * 2, RECONNECT_MAX_DELAY)
        raise SessionEnded(f"the ECS Exec session was lost and could not be resumed: {last}")

    async def _resend(self) -> None:
        while True:
            await self._clock.sleep(RESEND_INTERVAL)
            try:
                self._state.due(self._clock.monotonic())
            except ssm_channel.ChannelError as error:
                self._events.put_nowait(SessionEnded(f"the ECS Exec session stalled: {error}"))
                return
            await self._flush()

    async def ready(self) -> None:
        """Wait for the handshake to complete (input is not sent before)."""
        waiter = asyncio.ensure_future(self._ready.wait())
        try:
            await asyncio.wait({waiter, *self._tasks}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            waiter.cancel()
        if self._ready.is_set():
            return
        for task in self._tasks:
            if task.done() and not task.cancelled() and task.exception() is not None:
                raise SessionEnded(str(task.exception())) from task.exception()
        raise SessionEnded("the ECS Exec session closed before its handshake completed")

    async def send(self, payload_type: int, data: bytes) -> None:
        """Send `data` as input messages of at most STREAM_PAYLOAD_SIZE bytes, waiting
        while the window is full or publication is paused."""
        step = ssm_channel.STREAM_PAYLOAD_SIZE
        for start in range(0, len(data), step):
            while self._state.paused or not self._state.window_open():
                self._changed.clear()
                await self._changed.wait()
            chunk = data[start : start + step]
            self._state.send_stream(payload_type, chunk, self._clock.monotonic())
            await self._flush()

    async def send_flag(self, flag: ssm_channel.Flag) -> None:
        await self.send(PayloadType.FLAG, int(flag).to_bytes(4, "big"))

    async def output(self) -> AsyncIterator[ssm_channel.Delivered]:
        """What the agent sends, in order, until it closes the channel."""
        while True:
            event = await self._events.get()
            self._drained.set()
            if isinstance(event, BaseException):
                raise event
            if isinstance(event, ssm_channel.Closed):
                self.closed = True
                self.closed_output = event.output
                return
            yield event
