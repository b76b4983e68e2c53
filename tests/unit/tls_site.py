"""A loopback HTTPS server for tests of what a real TLS handshake shows a handler
(the serving certificate it gets, the client certificate it verified)."""

from __future__ import annotations

import contextlib
import ssl
from collections.abc import AsyncIterator, Awaitable, Callable

from aiohttp import web


@contextlib.asynccontextmanager
async def serving(
    context: ssl.SSLContext, handler: Callable[[web.Request], Awaitable[web.Response]]
) -> AsyncIterator[int]:
    """`handler` answers GET / on a free loopback port (yielded) with `context`."""
    app = web.Application()
    app.router.add_get("/", handler)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0, ssl_context=context)
    await site.start()
    try:
        yield int(runner.addresses[0][1])
    finally:
        await runner.cleanup()
