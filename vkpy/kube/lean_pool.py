"""Kept-alive HTTP/1.1 connections for the heartbeat client's small requests.

One process hosting 1000 nodes renews 100 Leases a second. Through aiohttp each
renewal cost about 400 µs of the agent's CPU (a URL parsed and a request, response,
payload and writer object built around a 300-byte body, with tracing hooks and timers)
while framing the answer is a few µs: half of a 1000-node agent's steady CPU, and why
its CPU per node stayed 1.1-1.2x kwok's (issue 30). aiohttp has no lighter way to send
a request, so the heartbeat client (a node's registration, status and Lease: small JSON
requests, never a stream) sends its requests here: one write of the request's bytes on
a kept-alive connection (asyncio's TLS, with the API client's small read buffer,
`tls_pool.ClientTLS`), the answer framed by httptools (llhttp, the parser under
uvicorn and aiohttp). That is about a third of the cost.

What is written here is only the request line and headers and the choice of a
connection; TLS, sockets and HTTP parsing are asyncio's and httptools'. Watches, logs
and every other request stay on aiohttp, as does a client behind a proxy (`usable`).
"""

from __future__ import annotations

import asyncio
import ssl
from collections.abc import Mapping, Sequence
from urllib.parse import urlencode, urlsplit

import httptools

from vkpy.kube.tls_pool import open_tls

RETRIED = frozenset({"GET", "HEAD", "PUT", "DELETE"})
"""Idempotent methods, sent once more on a fresh connection when a kept-alive one turns
out closed before any answer (the server may close an idle connection at any time)."""


class LeanConnectionError(ConnectionError):
    """The connection closed before the whole answer, or the answer was not HTTP."""


class _Connection(asyncio.Protocol):
    """One connection: one request at a time, its answer framed by httptools."""

    def __init__(self) -> None:
        self.transport: asyncio.BaseTransport | None = None
        self.open = False
        self.heard = False
        """Whether any byte of the current answer arrived."""
        self._parser: httptools.HttpResponseParser | None = None
        self._answer: asyncio.Future[tuple[int, bytes, bool]] | None = None
        self._body: list[bytes] = []

    # asyncio.Protocol

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport
        self.open = True

    def connection_lost(self, exc: Exception | None) -> None:
        self.open = False
        self._fail(
            f"the connection closed ({exc!r})" if exc else "the server closed the connection"
        )

    def data_received(self, data: bytes) -> None:
        if self._parser is None:  # nothing was asked: a server speaking now is broken
            self.close()
            return
        self.heard = True
        try:
            self._parser.feed_data(data)
        except httptools.HttpParserError as error:
            self._fail(f"not an HTTP answer: {error}")
            self.close()

    # httptools' callbacks

    def on_body(self, body: bytes) -> None:
        self._body.append(body)

    def on_message_complete(self) -> None:
        parser, answer = self._parser, self._answer
        self._parser = self._answer = None
        if parser is not None and answer is not None and not answer.done():
            body = b"".join(self._body)
            answer.set_result((parser.get_status_code(), body, parser.should_keep_alive()))

    # the pool's side

    async def exchange(self, request: bytes) -> tuple[int, bytes, bool]:
        """Send `request`; (status, body, whether the connection may be kept)."""
        assert self.transport is not None
        answer: asyncio.Future[tuple[int, bytes, bool]] = asyncio.get_running_loop().create_future()
        self._answer, self._body, self.heard = answer, [], False
        self._parser = httptools.HttpResponseParser(self)
        self.transport.write(request)  # type: ignore[attr-defined]
        return await answer

    def close(self) -> None:
        self.open = False
        if self.transport is not None:
            self.transport.close()

    def _fail(self, why: str) -> None:
        answer = self._answer
        self._parser = self._answer = None
        if answer is not None and not answer.done():
            answer.set_exception(LeanConnectionError(why))


class LeanPool:
    """Kept-alive connections to one API server, taken last-used first. The caller
    bounds the requests in flight (the client's gate) and their time (a timeout that
    cancels: the connection is then closed, its answer unknown)."""

    def __init__(
        self, url: str, context: ssl.SSLContext | None, server_hostname: str | None = None
    ) -> None:
        parts = urlsplit(url)
        self._tls = parts.scheme == "https"
        if self._tls and context is None:
            raise ValueError(f"{url}: https needs a TLS context")
        self._context = context
        self._host = parts.hostname or "localhost"
        self._port = parts.port or (443 if self._tls else 80)
        self._server_hostname = server_hostname or self._host
        self._prefix = parts.path.rstrip("/")
        self._authority = parts.netloc
        self._idle: list[_Connection] = []
        self._open: set[_Connection] = set()

    @staticmethod
    def usable(url: str, proxy: str | None) -> bool:
        """Whether requests to `url` can go through a lean pool: http(s), no proxy."""
        return proxy is None and urlsplit(url).scheme in ("http", "https")

    @property
    def connections(self) -> int:
        """Connections open now (idle or answering)."""
        return sum(1 for connection in self._open if connection.open)

    async def request(
        self,
        method: str,
        path: str,
        query: Sequence[tuple[str, str]],
        headers: Mapping[str, str],
        body: bytes | None,
    ) -> tuple[int, bytes]:
        """(status, body) of one request. Raises OSError (LeanConnectionError when the
        connection failed after it was made)."""
        target = self._prefix + path + ("?" + urlencode(query) if query else "")
        lines = [f"{method} {target} HTTP/1.1", f"Host: {self._authority}"]
        lines.extend(f"{name}: {value}" for name, value in headers.items())
        if body is not None or method in ("POST", "PUT", "PATCH"):
            lines.append(f"Content-Length: {len(body or b'')}")
        request = ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1") + (body or b"")
        while True:
            connection, kept = await self._take()
            try:
                status, answer, keep = await connection.exchange(request)
            except LeanConnectionError:
                connection.close()
                if kept and not connection.heard and method in RETRIED:
                    continue  # an idle connection the server had closed: once more
                raise
            except BaseException:  # cancelled (the caller's timeout): the answer is unknown
                connection.close()
                raise
            if keep and connection.open:
                self._idle.append(connection)
            else:
                connection.close()
            return status, answer

    async def _take(self) -> tuple[_Connection, bool]:
        """An idle open connection (True) or a new one (False)."""
        while self._idle:
            connection = self._idle.pop()
            if connection.open:
                return connection, True
            self._open.discard(connection)
        connection = await self._connect()
        self._open = {c for c in self._open if c.open}
        self._open.add(connection)
        return connection, False

    async def _connect(self) -> _Connection:
        if not self._tls:
            _, plain = await asyncio.get_running_loop().create_connection(
                _Connection, self._host, self._port
            )
            return plain
        assert self._context is not None
        return await open_tls(
            _Connection, self._host, self._port, self._context, self._server_hostname
        )

    async def close(self) -> None:
        """Close every connection."""
        for connection in self._open:
            connection.close()
        self._open.clear()
        self._idle.clear()
        await asyncio.sleep(0)  # let the transports close
