"""`/exec` and `/attach`: remote commands over SPDY/3.1 or a WebSocket channel protocol.

What `kubectl exec` and `kubectl attach` reach through the API server (which speaks
SPDY to the kubelet, translating kubectl's WebSocket when needed), and what direct
WebSocket clients reach. The request is checked in plain HTTP first (vkpy.api.
stream_request), then upgraded:

- SPDY: the client's `X-Stream-Protocol-Version` offers are negotiated (403 with
  `X-Accepted-Stream-Protocol-Versions` when none fits), `101` goes out, and the
  client opens its streams (error, stdin, stdout, stderr, resize, by `streamtype`),
  which must all arrive within the stream creation timeout;
- WebSocket: the subprotocol is negotiated, the lowest output channel gets an empty
  message (the kubelet's "streams are ready"), and the channels are the streams.

Then the backend hook runs with the streams as a `StreamIO`. When it returns, stdout
and stderr are closed, the outcome goes on the error stream (Success,
NonZeroExitCode with the code, or InternalError with the backend's message; a
backend that cannot exec or attach says so there), and the connection is closed
(GOAWAY for SPDY, a normal closure for WebSocket). When the client goes away first
the hook is cancelled, which ends the command.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable
from typing import Literal

from aiohttp import web

from vkpy.api.state import AUDIT_DETAIL, AUDIT_OUTCOME, deps, plain
from vkpy.api.streaming.shared import (
    SESSIONS,
    SESSIONS_TOTAL,
    ByteQueue,
    StreamSettings,
    run_backend_call,
)
from vkpy.api.streaming.spdy_session import SpdySession, SpdyStream
from vkpy.api.streaming.stream_io import (
    ChannelSink,
    QueueSource,
    ResizeCheck,
    ResizeEvents,
    SpdySink,
)
from vkpy.api.streaming.stream_request import (
    Target,
    find_target,
    has_container,
    refuse_protocols,
    stream_settings,
)
from vkpy.api.streaming.upgrade import UpgradedConnection, is_spdy_upgrade, is_websocket_upgrade
from vkpy.api.streaming.ws_channels import ChannelSession, choose_protocol, prepare_websocket
from vkpy.providers.base import (
    AttachProvider,
    ExecProvider,
    Provider,
    StreamIO,
)
from vkpy.providers.errors import UnsupportedError
from vkpy.streams import channels
from vkpy.streams.channels import Channel
from vkpy.streams.remotecommand import (
    HEADER_PROTOCOL_VERSION,
    SPDY_REMOTECOMMAND_PROTOCOLS,
    ExitCode,
    InternalError,
    Outcome,
    StreamOptions,
    StreamType,
    Success,
    error_stream_payload,
    negotiate,
)

log = logging.getLogger(__name__)

Kind = Literal["exec", "attach"]


# --- the request -------------------------------------------------------------------------------


async def exec_handler(request: web.Request) -> web.StreamResponse:
    return await _serve(request, "exec")


async def attach_handler(request: web.Request) -> web.StreamResponse:
    return await _serve(request, "attach")


async def _serve(request: web.Request, kind: Kind) -> web.StreamResponse:
    target = find_target(request)
    if isinstance(target, web.Response):
        return target
    container = request.match_info["container"]
    if not has_container(target.pod, container):
        return plain(404, f'container not found ("{container}")')
    options = StreamOptions.from_query(request.query)
    if not options.any_io:
        return plain(400, "you must specify at least 1 of stdin, stdout, stderr")
    command = tuple(request.query.getall("command", ())) if kind == "exec" else ()
    if kind == "exec" and not command:
        return plain(400, "you must specify a command")
    problem = _command_problem(command)
    if problem:
        return plain(400, f"invalid command: {problem}")
    call = _Call(kind, deps(request).backend(target.pod), target, container, command, options)
    if is_websocket_upgrade(request):
        return await _serve_websocket(request, call)
    offered = request.headers.getall(HEADER_PROTOCOL_VERSION, ())
    if not channels.split_offered(offered):
        return plain(400, f"unable to upgrade: {HEADER_PROTOCOL_VERSION} is required")
    protocol = negotiate(offered)
    if protocol is None:
        return refuse_protocols(offered, SPDY_REMOTECOMMAND_PROTOCOLS)
    if not is_spdy_upgrade(request):
        return plain(400, "unable to upgrade: missing upgrade headers in request")
    return await _serve_spdy(request, call, protocol)


def _command_problem(command: tuple[str, ...]) -> str:
    """Why no operating system can run `command` (empty if it can be tried)."""
    if command and not command[0]:
        return "the executable name is empty"
    for number, argument in enumerate(command, 1):
        if "\x00" in argument:
            return f"argument {number} contains a NUL byte"
    return ""


class _Call:
    """One exec or attach: what to run, and the bookkeeping around running it."""

    def __init__(
        self,
        kind: Kind,
        provider: Provider,
        target: Target,
        container: str,
        command: tuple[str, ...],
        options: StreamOptions,
    ) -> None:
        self.kind = kind
        self.provider = provider
        self.ref = target.ref
        self.container = container
        self.command = command
        self.options = options
        self.what = f"{kind} {target.ref}/{container}"

    def backend(self, io: StreamIO) -> Awaitable[int | None]:
        provider = self.provider
        if self.kind == "exec":
            if isinstance(provider, ExecProvider):
                return provider.exec_in_container(self.ref, self.container, self.command, io)
        elif isinstance(provider, AttachProvider):
            return provider.attach_to_container(self.ref, self.container, io)
        return _unsupported(f"the {provider.name} backend does not support {self.kind}")

    async def run(
        self, io: StreamIO, lost: asyncio.Future[None], settings: StreamSettings
    ) -> Outcome | None:
        return await run_backend_call(
            self.backend(io),
            lost,
            what=self.what,
            cancel_timeout=settings.cancel_timeout,
            exit_codes=self.kind == "exec",
            doing="error executing command in container"
            if self.kind == "exec"
            else "error attaching to container",
        )

    def log_end(
        self,
        request: web.Request,
        transport: str,
        outcome: Outcome | None,
        reason: str,
        started: float,
    ) -> str:
        label = _outcome_label(outcome, reason)
        request[AUDIT_OUTCOME] = label
        detail: dict[str, object] = {"transport": transport}
        if isinstance(outcome, ExitCode):
            detail["exit_code"] = outcome.code
        request[AUDIT_DETAIL] = detail
        SESSIONS_TOTAL.labels(self.kind, transport, label).inc()
        log.info(
            f"{self.kind} session ended",
            extra={
                "pod": str(self.ref),
                "uid": self.ref.uid,
                "container": self.container,
                "transport": transport,
                "outcome": label,
                "seconds": round(time.monotonic() - started, 3),
                **({"reason": reason} if reason else {}),
            },
        )
        return label


async def _unsupported(message: str) -> int:
    raise UnsupportedError(message)


def _outcome_label(outcome: Outcome | None, reason: str) -> str:
    if outcome is None:
        timed_out = reason.startswith("timed out") or reason == "idle timeout"
        return "timeout" if timed_out else "client_gone"
    if isinstance(outcome, Success):
        return "success"
    if isinstance(outcome, ExitCode):
        return "exit_code"
    return "error"


# --- SPDY --------------------------------------------------------------------------------------


async def _serve_spdy(request: web.Request, call: _Call, protocol: str) -> web.StreamResponse:
    settings = stream_settings(request)
    connection = UpgradedConnection(request)
    session = SpdySession(connection, settings, what=call.what)
    response = await connection.upgrade(session, {HEADER_PROTOCOL_VERSION: protocol})
    started = time.monotonic()
    SESSIONS.labels(call.kind, "spdy").inc()
    outcome: Outcome | None = None
    reason = ""
    try:
        expected = call.options.expected_streams(protocol)
        streams = await _wait_for_streams(session, expected, settings.stream_creation_timeout)
        if not expected <= streams.keys():
            reason = session.lost_reason or "timed out waiting for client to create streams"
            error_stream = streams.get(StreamType.ERROR)
            if error_stream is not None and not session.lost.done():
                await _finish_spdy(streams, protocol, InternalError(reason))
            return response
        io = _spdy_io(streams, call)
        outcome = await call.run(io, session.lost, settings)
        if outcome is None:
            reason = session.lost_reason
        else:
            await _finish_spdy(streams, protocol, outcome)
    finally:
        SESSIONS.labels(call.kind, "spdy").dec()
        call.log_end(request, "spdy", outcome, reason, started)
        await session.close()
    return response


async def _wait_for_streams(
    session: SpdySession, expected: frozenset[StreamType], timeout: float
) -> dict[StreamType, SpdyStream]:
    """Collect the client's streams by type until all `expected` are here, the client is
    gone, or `timeout` passes; streams of other types are ignored."""
    found: dict[StreamType, SpdyStream] = {}
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while not expected <= found.keys():
        remaining = deadline - loop.time()
        if remaining <= 0:
            break
        try:
            async with asyncio.timeout(remaining):
                stream = await session.accept()
        except TimeoutError:
            break
        if stream is None:
            break
        try:
            kind = StreamType(stream.stream_type)
        except ValueError:
            kind = None
        if kind is None or kind not in expected:
            log.debug("ignoring an unexpected stream", extra={"streamtype": stream.stream_type})
            stream.discard()
            continue
        previous = found.get(kind)
        if previous is not None:
            previous.discard()
        found[kind] = stream
    for kind, stream in found.items():
        if kind not in (StreamType.STDIN, StreamType.RESIZE):
            stream.discard()
    return found


def _spdy_io(streams: dict[StreamType, SpdyStream], call: _Call) -> StreamIO:
    stdin = streams.get(StreamType.STDIN)
    stdout = streams.get(StreamType.STDOUT)
    stderr = streams.get(StreamType.STDERR)
    resize = streams.get(StreamType.RESIZE)
    return StreamIO(
        stdin=QueueSource(stdin.input) if stdin is not None else None,
        stdout=SpdySink(stdout) if stdout is not None else None,
        stderr=SpdySink(stderr) if stderr is not None else None,
        tty=call.options.tty,
        resize=ResizeEvents(resize.input, call.what) if resize is not None else None,
    )


async def _finish_spdy(
    streams: dict[StreamType, SpdyStream], protocol: str, outcome: Outcome
) -> None:
    """FIN stdout and stderr, then the Status on the error stream and its FIN."""
    for kind in (StreamType.STDOUT, StreamType.STDERR):
        stream = streams.get(kind)
        if stream is not None:
            await stream.close()
    error_stream = streams.get(StreamType.ERROR)
    if error_stream is None:
        return
    payload = error_stream_payload(protocol, outcome)
    if payload:
        await error_stream.write(payload)
    await error_stream.close()


# --- WebSocket ---------------------------------------------------------------------------------


async def _serve_websocket(request: web.Request, call: _Call) -> web.StreamResponse:
    protocol = choose_protocol(request, channels.REMOTECOMMAND_PROTOCOLS)
    if isinstance(protocol, web.Response):
        return protocol
    settings = stream_settings(request)
    ws = await prepare_websocket(request, protocol)
    options = call.options
    inputs: dict[int, ByteQueue] = {}
    if options.stdin:
        inputs[Channel.STDIN] = ByteQueue()
    if options.tty:
        inputs[Channel.RESIZE] = ByteQueue()
    checks: dict[int, Callable[[bytes], bool]] = (
        {Channel.RESIZE: ResizeCheck(call.what)} if options.tty else {}
    )
    session = ChannelSession(ws, protocol, settings, inputs, what=call.what, checks=checks)
    started = time.monotonic()
    SESSIONS.labels(call.kind, "websocket").inc()
    outcome: Outcome | None = None
    reason = ""
    try:
        first = (
            Channel.STDOUT
            if options.stdout
            else Channel.STDERR
            if options.stderr
            else Channel.ERROR
        )
        await session.send(first, b"")
        stdout = ChannelSink(session, Channel.STDOUT) if options.stdout else None
        stderr = ChannelSink(session, Channel.STDERR) if options.stderr else None
        io = StreamIO(
            stdin=QueueSource(inputs[Channel.STDIN]) if options.stdin else None,
            stdout=stdout,
            stderr=stderr,
            tty=options.tty,
            resize=ResizeEvents(inputs[Channel.RESIZE], call.what) if options.tty else None,
        )
        outcome = await call.run(io, session.lost, settings)
        if outcome is None:
            reason = session.lost_reason
        else:
            for sink in (stdout, stderr):
                if sink is not None:
                    await sink.close()
            payload = error_stream_payload(protocol, outcome)
            if payload:
                await session.send(Channel.ERROR, payload)
    finally:
        SESSIONS.labels(call.kind, "websocket").dec()
        call.log_end(request, "websocket", outcome, reason, started)
        await session.close()
    return ws
