"""Accepting kubelet API connections with the bounds a server on a hostile network needs.

Anyone who can reach :10250 can open connections, credentials or not, and aiohttp's
own site keeps each for as long as the client likes, with a 256 KiB TLS read buffer
per connection: a thousand idle TLS connections cost a quarter of a GiB and a
thousand file descriptors. So vkpy listens itself (a plain asyncio TCP server) and
puts every accepted connection through, in order:

1. the caps (`ConnectionLimits.max_connections`, and `max_connections_per_client`
   for one client address, per port; and over all ports of the process a share of
   its open-file limit, vkpy.core.open_files): over any, the connection is reset at once,
   before any TLS work, counted in vkpy_kubelet_api_connections_refused_total and
   logged at most once a minute;
2. TLS with a handshake deadline and a 16 KiB read buffer (`TLSConnection`);
3. HTTP (`KubeletConnection`, aiohttp's handler with more): a deadline for each
   request's head, from the connection's start or from the first byte of a later
   request; keep-alive connections idle past `idle_timeout` closed; a request that
   cannot be parsed answered with a bare status line and text (never the offending
   bytes echoed back); no `Server` header on any answer; and WebSocket frames from
   the client that are not masked closing the connection with 1002, as RFC 6455
   requires.

A request being handled (a `kubectl logs -f`, an exec session) is never cut by these
deadlines; the streams have their own idle timeout.
"""

from __future__ import annotations

import asyncio
import errno
import logging
import socket
import ssl
import time
from asyncio import sslproto
from collections.abc import Callable
from http import HTTPStatus
from typing import Any, cast

from aiohttp import web
from aiohttp.http_exceptions import LineTooLong
from aiohttp.http_websocket import WebSocketReader
from aiohttp.typedefs import Handler
from aiohttp.web_protocol import RequestHandler
from prometheus_client import Counter, Gauge

from vkpy.api.settings import ConnectionLimits
from vkpy.api.streaming.ws_masking import MaskCheck

log = logging.getLogger(__name__)

READ_BUFFER = 16 * 1024
"""Bytes read from a TLS socket at a time (asyncio's default: 256 KiB per connection)."""
REFUSAL_LOG_INTERVAL = 60.0

CONNECTIONS = Gauge("vkpy_kubelet_api_connections_open", "Kubelet API connections open now.")
REFUSED = Counter(
    "vkpy_kubelet_api_connections_refused_total",
    "Kubelet API connections reset on arrival, by cap (total, client, process).",
    ["cap"],
)
TIMED_OUT = Counter(
    "vkpy_kubelet_api_connections_timed_out_total",
    "Kubelet API connections closed by a deadline (handshake, header, idle).",
    ["deadline"],
)


class ListenError(Exception):
    """The API cannot listen (address in use, not local, not allowed): one line for
    the user, naming the address and the flag that changes it."""


class ConnectionGate:
    """Counts open connections, in total and per client address, and admits or refuses.

    A port's gate has the process's gate as `parent` (every port of a node set
    counts against it too): over the process's cap a connection is refused as
    "process" whatever its port's count."""

    def __init__(
        self,
        limits: ConnectionLimits,
        clock: Callable[[], float] = time.monotonic,
        parent: ConnectionGate | None = None,
        total_cap: str = "total",
    ):
        self.limits = limits
        self.parent = parent
        self._total_cap = total_cap
        self.total = 0
        self.by_client: dict[str, int] = {}
        self._clock = clock
        self._refused_since_log: dict[str, int] = {}
        self._last_log = -REFUSAL_LOG_INTERVAL

    def admit(self, client: str) -> bool:
        if self.parent is not None and not self.parent.admit(client):
            return False
        cap = ""
        if self.total >= self.limits.max_connections:
            cap = self._total_cap
        elif self.by_client.get(client, 0) >= self.limits.max_connections_per_client:
            cap = "client"
        if cap:
            self._refused(cap, client)
            if self.parent is not None:
                self.parent.release(client)
            return False
        self.total += 1
        self.by_client[client] = self.by_client.get(client, 0) + 1
        if self.parent is None:
            CONNECTIONS.inc()
        return True

    def release(self, client: str) -> None:
        self.total -= 1
        left = self.by_client.get(client, 1) - 1
        if left > 0:
            self.by_client[client] = left
        else:
            self.by_client.pop(client, None)
        if self.parent is None:
            CONNECTIONS.dec()
        else:
            self.parent.release(client)

    def _refused(self, cap: str, client: str) -> None:
        REFUSED.labels(cap).inc()
        self._refused_since_log[cap] = self._refused_since_log.get(cap, 0) + 1
        now = self._clock()
        if now - self._last_log < REFUSAL_LOG_INTERVAL:
            return
        self._last_log = now
        log.warning(
            "kubelet API connections refused: too many open",
            extra={
                "client": client,
                "open": self.total,
                "open_from_client": self.by_client.get(client, 0),
                "max_connections": self.limits.max_connections,
                "max_connections_per_client": self.limits.max_connections_per_client,
                **{f"refused_{k}": v for k, v in self._refused_since_log.items()},
            },
        )
        self._refused_since_log.clear()


def _client_of(transport: asyncio.BaseTransport) -> str:
    peer = transport.get_extra_info("peername")
    if isinstance(peer, tuple) and peer:
        return str(peer[0])
    return "unknown"


class TLSConnection(sslproto.SSLProtocol):
    """asyncio's TLS layer with a small read buffer, behind the gate."""

    max_size = READ_BUFFER

    def __init__(
        self,
        loop: asyncio.AbstractEventLoop,
        app: asyncio.BaseProtocol,
        context: ssl.SSLContext,
        gate: ConnectionGate,
    ) -> None:
        super().__init__(
            loop,
            app,
            context,
            cast(Any, None),  # no waiter: nothing awaits the handshake of a server connection
            server_side=True,
            ssl_handshake_timeout=cast(Any, gate.limits.handshake_timeout),
        )
        self._gate = gate
        self._client: str | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        client = _client_of(transport)
        if not self._gate.admit(client):
            cast(asyncio.Transport, transport).abort()
            return
        self._client = client
        super().connection_made(transport)

    def connection_lost(self, exc: BaseException | None) -> None:
        if self._client is None:
            return  # refused: nothing was started
        self._gate.release(self._client)
        self._client = None
        if isinstance(exc, ConnectionAbortedError) and "handshake" in str(exc):
            TIMED_OUT.labels("handshake").inc()
        super().connection_lost(exc)


class _BareResponse(web.Response):
    """An answer aiohttp writes itself (a request it could not parse), without the
    `Server` header it adds to everything."""

    async def _prepare_headers(self) -> None:
        await super()._prepare_headers()
        self.headers.popall("Server", None)


MAX_HEADER_BYTES = 2**20
"""Longest request line taken: a kubelet's whole head (Go's default, 1 MiB). An exec's
command travels in its URL (`kubectl exec -- echo <20,000 characters>`); aiohttp's
own limit, 8 KiB, was answered with 431."""
MAX_FIELD_BYTES = 2**16
"""Longest header field taken. With aiohttp's 128 fields at most, a head costs at most
8 MiB more than its request line (1 MiB for every field would let one connection
hold 128 MiB); a field this long is already far past what any client sends."""

_CLOSE_PROTOCOL_ERROR = bytes([0x88, 0x02, 0x03, 0xEA])
"""A WebSocket close frame (unmasked, from the server) with status 1002."""


class KubeletConnection(RequestHandler):
    """aiohttp's HTTP/1.1 connection handler with vkpy's deadlines (module docstring)."""

    def __init__(self, manager: Any, *, loop: asyncio.AbstractEventLoop, limits: ConnectionLimits):
        super().__init__(
            manager,
            loop=loop,
            keepalive_timeout=limits.idle_timeout,
            access_log=cast(Any, None),  # vkpy logs its own way
            max_line_size=MAX_HEADER_BYTES,
            max_field_size=MAX_FIELD_BYTES,
        )
        self._limits = limits
        self._head_deadline: asyncio.TimerHandle | None = None
        self._busy = 0

    # --- deadlines ---------------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        super().connection_made(transport)
        self._arm_head_deadline()

    def data_received(self, data: bytes) -> None:
        if not self._busy and self._head_deadline is None:
            self._arm_head_deadline()
        super().data_received(data)

    def connection_lost(self, exc: BaseException | None) -> None:
        self._disarm()
        super().connection_lost(exc)

    def request_started(self) -> None:
        self._busy += 1
        self._disarm()

    def request_finished(self) -> None:
        self._busy -= 1

    def _arm_head_deadline(self) -> None:
        self._head_deadline = self._loop.call_later(
            self._limits.request_header_timeout, self._head_expired
        )

    def _disarm(self) -> None:
        if self._head_deadline is not None:
            self._head_deadline.cancel()
            self._head_deadline = None

    def _head_expired(self) -> None:
        self._head_deadline = None
        if self._busy:
            return
        TIMED_OUT.labels("header").inc()
        log.debug("no complete request head in time: connection closed")
        self._abort()

    def _abort(self) -> None:
        transport = self.transport
        if transport is not None:
            transport.abort()
        self.force_close()

    def _process_keepalive(self) -> None:
        open_before = not self._force_close
        super()._process_keepalive()
        if open_before and self._force_close:
            TIMED_OUT.labels("idle").inc()

    # --- answers aiohttp writes itself ----------------------------------------------------

    def handle_error(
        self,
        request: Any,
        status: int = 500,
        exc: BaseException | None = None,
        message: str | None = None,
    ) -> web.StreamResponse:
        if status == 400 and isinstance(exc, LineTooLong):
            status = 431
        reason = HTTPStatus(status).phrase
        if status >= 500:
            log.error("kubelet API request failed", exc_info=exc)
        else:
            log.debug("request refused before routing", extra={"status": status})
        response = _BareResponse(status=status, text=f"{status} {reason}")
        response.force_close()
        return response

    # --- WebSocket ------------------------------------------------------------------------

    def set_parser(self, parser: Any, data_received_cb: Callable[[], None] | None = None) -> None:
        if isinstance(parser, WebSocketReader):
            parser = MaskCheck(parser, self._unmasked_frame)
        super().set_parser(parser, data_received_cb)

    def _unmasked_frame(self) -> None:
        log.warning("WebSocket frame from the client is not masked: closed with 1002")
        transport = self.transport
        if transport is not None and not transport.is_closing():
            transport.write(_CLOSE_PROTOCOL_ERROR)
            transport.close()


def connection_of(request: web.BaseRequest) -> KubeletConnection | None:
    protocol = request.protocol
    return protocol if isinstance(protocol, KubeletConnection) else None


@web.middleware
async def track_requests(request: web.Request, handler: Handler) -> web.StreamResponse:
    """Tell the connection a request is being handled (its deadlines do not apply)."""
    connection = connection_of(request)
    if connection is None:
        return await handler(request)
    connection.request_started()
    try:
        return await handler(request)
    finally:
        connection.request_finished()


async def drop_server_header(_: web.Request, response: web.StreamResponse) -> None:
    """on_response_prepare: no `Server: Python/... aiohttp/...` on any answer."""
    response.headers.popall("Server", None)


def _listen_error(host: str, port: int, error: OSError) -> ListenError:
    where = f"{host}:{port}"
    if error.errno == errno.EADDRINUSE:
        why = "the address is already in use (another kubelet or vkpy node?)"
    elif error.errno == errno.EADDRNOTAVAIL:
        why = "the address is not one of this host's"
    elif error.errno == errno.EACCES:
        why = "permission denied (ports below 1024 need root)"
    else:
        why = error.strerror or str(error)
    return ListenError(
        f"cannot serve the kubelet API on {where}: {why}; choose another port with "
        "--port or another address with --listen-address"
    )


async def listen(
    server: Any,
    host: str,
    port: int,
    context: ssl.SSLContext,
    limits: ConnectionLimits,
    gate: ConnectionGate | None = None,
) -> tuple[asyncio.Server, ConnectionGate]:
    """Listen on host:port; `server` is aiohttp's low-level Server (AppRunner.server).
    `gate`: the connection caps to count against (default: new ones for this port; a
    node set gives each node's port its own, as each kubelet has).

    ListenError when the address cannot be had."""
    loop = asyncio.get_running_loop()
    gate = gate or ConnectionGate(limits)

    def accept() -> asyncio.BaseProtocol:
        app = KubeletConnection(server, loop=loop, limits=limits)
        return TLSConnection(loop, app, context, gate)

    try:
        listening = await loop.create_server(
            accept, host, port, reuse_address=True, family=socket.AF_UNSPEC, backlog=1024
        )
    except OSError as error:
        raise _listen_error(host, port, error) from None
    return listening, gate
