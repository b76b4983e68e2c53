"""`/portForward`: forwarded TCP connections over SPDY/3.1 or a WebSocket channel protocol.

What `kubectl port-forward` reaches through the API server (always SPDY towards the
kubelet, `portforward.k8s.io`), and what direct WebSocket clients reach.

- SPDY: one upgraded connection carries any number of forwarded connections; each is
  a `data` and an `error` stream the client opens with the same `requestid` and the
  target `port` (vkpy.streams.remotecommand.PortForwardPairer). A pair that stays
  incomplete for the stream creation timeout is dropped with a message on whichever
  half came. Each complete pair runs the backend's `port_forward` with the data
  stream as both directions; when it ends both streams are FIN'd. Only a real
  failure (connection refused, a backend that cannot forward) is written on the
  error stream, since kubectl ends the whole session on anything written there.
- WebSocket: the ports come from `?port=`, each gets data channel 2i and error
  channel 2i+1, both opened with the port number (little-endian uint16), and one
  forwarded connection each for the life of the socket.

The client going away cancels every forwarded connection.
"""

from __future__ import annotations

import asyncio
import logging
import time

from aiohttp import web

from vkpy.api.state import AUDIT_DETAIL, AUDIT_OUTCOME, deps, plain
from vkpy.api.streaming.shared import (
    PORT_FORWARD_CONNECTIONS,
    SESSIONS,
    SESSIONS_TOTAL,
    ByteQueue,
    StreamSettings,
)
from vkpy.api.streaming.spdy_session import SpdySession, SpdyStream
from vkpy.api.streaming.stream_io import ChannelSink, QueueSource, SpdySink
from vkpy.api.streaming.stream_request import Target, find_target, refuse_protocols, stream_settings
from vkpy.api.streaming.upgrade import UpgradedConnection, is_spdy_upgrade, is_websocket_upgrade
from vkpy.api.streaming.ws_channels import ChannelSession, choose_protocol, prepare_websocket
from vkpy.core.cancelling import cancel_and_wait
from vkpy.providers.base import ByteSink, ByteSource, PortForwardProvider, Provider
from vkpy.providers.errors import ProviderError
from vkpy.streams import channels
from vkpy.streams.remotecommand import (
    HEADER_PROTOCOL_VERSION,
    SPDY_PORTFORWARD_PROTOCOLS,
    PortForwardPairer,
    PortForwardRequest,
    PortForwardStreamError,
    negotiate,
)

log = logging.getLogger(__name__)


async def port_forward_handler(request: web.Request) -> web.StreamResponse:
    target = find_target(request)
    if isinstance(target, web.Response):
        return target
    provider = deps(request).backend(target.pod)
    if is_websocket_upgrade(request):
        return await _serve_websocket(request, provider, target)
    offered = request.headers.getall(HEADER_PROTOCOL_VERSION, ())
    if not channels.split_offered(offered):
        return plain(400, f"unable to upgrade: {HEADER_PROTOCOL_VERSION} is required")
    protocol = negotiate(offered, SPDY_PORTFORWARD_PROTOCOLS)
    if protocol is None:
        return refuse_protocols(offered, SPDY_PORTFORWARD_PROTOCOLS)
    if not is_spdy_upgrade(request):
        return plain(400, "unable to upgrade: missing upgrade headers in request")
    return await _serve_spdy(request, provider, target, protocol)


async def _forward(
    provider: Provider,
    target: Target,
    port: int,
    inbound: ByteSource,
    outbound: ByteSink,
) -> str | None:
    """Run one forwarded connection; the error message for the client, if it failed."""
    PORT_FORWARD_CONNECTIONS.inc()
    try:
        if not isinstance(provider, PortForwardProvider):
            raise ProviderError(f"the {provider.name} backend does not support port forwarding")
        await provider.port_forward(target.ref, port, inbound, outbound)
    except ProviderError as error:
        ref = target.ref
        pod = f"{ref.name}_{ref.namespace}"
        return f"error forwarding port {port} to pod {pod}, uid {ref.uid}: {error}"
    finally:
        PORT_FORWARD_CONNECTIONS.dec()
    return None


def _log_end(
    request: web.Request,
    transport: str,
    target: Target,
    label: str,
    started: float,
    **extra: object,
) -> None:
    SESSIONS_TOTAL.labels("portforward", transport, label).inc()
    request[AUDIT_OUTCOME] = label
    request[AUDIT_DETAIL] = {"transport": transport, **extra}
    log.info(
        "port-forward session ended",
        extra={
            "pod": str(target.ref),
            "uid": target.ref.uid,
            "transport": transport,
            "outcome": label,
            "seconds": round(time.monotonic() - started, 3),
            **extra,
        },
    )


# --- SPDY --------------------------------------------------------------------------------------


class _SpdyForwarder:
    """Pairs the client's streams and runs one task per forwarded connection."""

    def __init__(
        self, session: SpdySession, provider: Provider, target: Target, settings: StreamSettings
    ) -> None:
        self._session = session
        self._provider = provider
        self._target = target
        self._settings = settings
        self._pairer = PortForwardPairer()
        self._streams: dict[int, SpdyStream] = {}
        self._timers: dict[str, asyncio.TimerHandle] = {}
        self._tasks: set[asyncio.Task[None]] = set()
        self.connections = 0
        self.ports: set[int] = set()

    async def run(self) -> None:
        try:
            while True:
                stream = await self._session.accept()
                if stream is None:
                    return
                await self._add(stream)
        finally:
            for timer in self._timers.values():
                timer.cancel()
            self._timers.clear()
            await cancel_and_wait(*self._tasks, timeout=self._settings.cancel_timeout)

    async def _add(self, stream: SpdyStream) -> None:
        self._streams[stream.id] = stream
        try:
            request = self._pairer.add(stream.id, stream.headers)
        except PortForwardStreamError as error:
            log.warning(
                "bad port-forward stream", extra={"pod": str(self._target.ref), "error": str(error)}
            )
            stream.discard()
            self._streams.pop(stream.id, None)
            if stream.stream_type == "error":
                await stream.write(str(error).encode())
            await stream.close()
            return
        if request is None:
            request_id = self._request_id_of(stream)
            if request_id not in self._timers:
                self._timers[request_id] = asyncio.get_running_loop().call_later(
                    self._settings.stream_creation_timeout, self._expire, request_id
                )
            return
        timer = self._timers.pop(request.request_id, None)
        if timer is not None:
            timer.cancel()
        task = asyncio.create_task(
            self._serve(request), name=f"port-forward {self._target.ref}:{request.port}"
        )
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    def _expire(self, request_id: str) -> None:
        self._timers.pop(request_id, None)
        self._pairer.discard(request_id)
        for stream in list(self._streams.values()):
            if self._request_id_of(stream) != request_id:
                continue
            self._streams.pop(stream.id, None)
            stream.discard()
            message = f"timed out waiting for streams of request {request_id}"
            log.warning(
                "incomplete port-forward request",
                extra={"pod": str(self._target.ref), "request": request_id},
            )
            task = asyncio.create_task(self._fail(stream, message), name="port-forward timeout")
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)

    @staticmethod
    def _request_id_of(stream: SpdyStream) -> str:
        rid = stream.headers.get("requestid")
        if rid:
            return rid
        return str(stream.id - 2 if stream.stream_type == "data" else stream.id)

    @staticmethod
    async def _fail(stream: SpdyStream, message: str) -> None:
        if stream.stream_type == "error":
            await stream.write(message.encode())
        await stream.close()

    async def _serve(self, request: PortForwardRequest) -> None:
        data = self._streams.pop(request.data_stream)
        error = self._streams.pop(request.error_stream)
        error.discard()
        self.connections += 1
        self.ports.add(request.port)
        try:
            message = await _forward(
                self._provider, self._target, request.port, QueueSource(data.input), SpdySink(data)
            )
            if message is not None:
                log.warning(
                    "port-forward failed", extra={"pod": str(self._target.ref), "error": message}
                )
                await error.write(message.encode())
        finally:
            data.discard()
            await data.close()
            await error.close()


async def _serve_spdy(
    request: web.Request, provider: Provider, target: Target, protocol: str
) -> web.StreamResponse:
    settings = stream_settings(request)
    connection = UpgradedConnection(request)
    what = f"portforward {target.ref}"
    session = SpdySession(connection, settings, what=what)
    response = await connection.upgrade(session, {HEADER_PROTOCOL_VERSION: protocol})
    started = time.monotonic()
    SESSIONS.labels("portforward", "spdy").inc()
    forwarder = _SpdyForwarder(session, provider, target, settings)
    try:
        await forwarder.run()
    finally:
        SESSIONS.labels("portforward", "spdy").dec()
        _log_end(
            request,
            "spdy",
            target,
            "timeout" if session.lost_reason == "idle timeout" else "success",
            started,
            connections=forwarder.connections,
            ports=",".join(map(str, sorted(forwarder.ports))),
            reason=session.lost_reason or "client sent GOAWAY",
        )
        await session.close()
    return response


# --- WebSocket ---------------------------------------------------------------------------------


def _ports(request: web.Request) -> list[int] | web.Response:
    raw = request.query.getall("port", ())
    if not raw:
        return plain(400, 'query parameter "port" is required')
    ports = []
    for value in raw:
        if not value.isascii() or not value.isdigit() or not 0 < int(value) <= 0xFFFF:
            return plain(400, f"invalid port {value!r}")
        ports.append(int(value))
    return ports


async def _serve_websocket(
    request: web.Request, provider: Provider, target: Target
) -> web.StreamResponse:
    ports = _ports(request)
    if isinstance(ports, web.Response):
        return ports
    protocol = choose_protocol(request, channels.PORTFORWARD_PROTOCOLS)
    if isinstance(protocol, web.Response):
        return protocol
    settings = stream_settings(request)
    ws = await prepare_websocket(request, protocol)
    inputs = {channels.port_forward_channels(i)[0]: ByteQueue() for i in range(len(ports))}
    what = f"portforward {target.ref}"
    session = ChannelSession(ws, protocol, settings, inputs, what=what)
    started = time.monotonic()
    SESSIONS.labels("portforward", "websocket").inc()
    tasks: list[asyncio.Task[None]] = []
    label = "success"
    try:
        for index, port in enumerate(ports):
            data_channel, error_channel = channels.port_forward_channels(index)
            prefix = channels.encode_port_prefix(port)
            await session.send(data_channel, prefix)
            await session.send(error_channel, prefix)
        for index, port in enumerate(ports):
            tasks.append(
                asyncio.create_task(
                    _serve_ws_port(session, provider, target, index, port, inputs),
                    name=f"port-forward {target.ref}:{port}",
                )
            )
        pending: set[asyncio.Future[None]] = set(tasks)
        while pending and not session.lost.done():
            _, pending = await asyncio.wait(
                pending | {session.lost}, return_when=asyncio.FIRST_COMPLETED
            )
            pending.discard(session.lost)
        if pending:
            label = "client_gone"
    finally:
        await cancel_and_wait(*tasks, timeout=settings.cancel_timeout)
        SESSIONS.labels("portforward", "websocket").dec()
        _log_end(request, "websocket", target, label, started, ports=",".join(map(str, ports)))
        await session.close()
    return ws


async def _serve_ws_port(
    session: ChannelSession,
    provider: Provider,
    target: Target,
    index: int,
    port: int,
    inputs: dict[int, ByteQueue],
) -> None:
    data_channel, error_channel = channels.port_forward_channels(index)
    message = await _forward(
        provider,
        target,
        port,
        QueueSource(inputs[data_channel]),
        ChannelSink(session, data_channel),
    )
    if message is not None:
        log.warning("port-forward failed", extra={"pod": str(target.ref), "error": message})
        await session.send(error_channel, message.encode())
