"""The API client's connections with a small TLS read buffer.

asyncio's TLS layer gives every connection a 256 KiB read buffer, and HTTP/1.1 needs
one connection per request in flight: a burst of pods (50 status patches at once)
leaves a pool of about 60 connections to the API server, and their buffers were 8 of
the 35 MiB a node with 1000 running pods held (tracemalloc, issue 17). A TLS record is
at most 16 KiB, so a 16 KiB buffer costs one more read per record at most, as on the
kubelet API's side (vkpy/api/listener.py).

aiohttp makes the TLS connection inside `loop.create_connection`, which always uses
asyncio's own TLS protocol; `SmallBufferConnector` instead opens the plain TCP
connection through aiohttp (happy eyeballs, timeouts and error mapping unchanged) and
runs TLS over it with `ClientTLS`, then hands aiohttp the TLS transport, as
`create_connection` would. The aiohttp internal this relies on is pinned by
tests/unit/api/streaming/test_dependency_internals.py.
"""

from __future__ import annotations

import asyncio
import ssl
from asyncio import sslproto
from collections.abc import Callable
from typing import Any, TypeVar, cast

import aiohttp

READ_BUFFER = 16 * 1024
HANDSHAKE_TIMEOUT = 60.0
"""asyncio's own default for a TLS handshake."""


class ClientTLS(sslproto.SSLProtocol):
    """asyncio's TLS layer (client side) with a 16 KiB read buffer."""

    max_size = READ_BUFFER


P = TypeVar("P", bound=asyncio.Protocol)


def client_tls(
    app: asyncio.BaseProtocol, context: ssl.SSLContext, server_hostname: str | None
) -> tuple[ClientTLS, asyncio.Future[None]]:
    """TLS (client side) for `app`, to run over a raw connection; the future is done
    when its handshake is."""
    loop = asyncio.get_running_loop()
    handshake: asyncio.Future[None] = loop.create_future()
    tls = ClientTLS(
        loop,
        app,
        context,
        handshake,
        server_side=False,
        server_hostname=server_hostname,
        ssl_handshake_timeout=cast(Any, HANDSHAKE_TIMEOUT),
    )
    return tls, handshake


async def open_tls(
    factory: Callable[[], P],
    host: str,
    port: int,
    context: ssl.SSLContext,
    server_hostname: str,
) -> P:
    """A TLS connection with `ClientTLS` carrying `factory()`'s protocol, handshake
    done (the heartbeat client's own connections, vkpy/kube/lean_pool.py). Raises
    OSError (ssl.SSLError for a failed handshake)."""
    app = factory()
    tls, handshake = client_tls(app, context, server_hostname)
    raw, _ = await asyncio.get_running_loop().create_connection(lambda: tls, host, port)
    try:
        await handshake
    except BaseException:
        raw.close()
        raise
    return app


class SmallBufferConnector(aiohttp.TCPConnector):
    """aiohttp's connector whose TLS connections use `ClientTLS`."""

    async def _wrap_create_connection(
        self, *args: Any, **kwargs: Any
    ) -> tuple[asyncio.Transport, aiohttp.client_proto.ResponseHandler]:
        context = kwargs.get("ssl")
        if not isinstance(context, ssl.SSLContext):
            return await super()._wrap_create_connection(*args, **kwargs)
        factory, *rest = args
        app = factory()
        tls, handshake = client_tls(app, context, kwargs.pop("server_hostname", None))
        kwargs.pop("ssl")
        raw, _ = await super()._wrap_create_connection(lambda: tls, *rest, **kwargs)
        try:
            await handshake
        except BaseException as error:
            raw.close()
            key = kwargs["req"].connection_key
            if isinstance(error, ssl.SSLCertVerificationError):
                raise aiohttp.ClientConnectorCertificateError(key, error) from error
            if isinstance(error, ssl.SSLError):
                raise aiohttp.ClientConnectorSSLError(key, error) from error
            if isinstance(error, OSError):
                raise aiohttp.ClientConnectorError(key, error) from error
            raise
        return cast(asyncio.Transport, tls._app_transport), app
