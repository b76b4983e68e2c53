"""A KubeClient on a local aiohttp server that plays the API server (on 127.0.0.1).

For tests of what the real client does on the wire (the order requests arrive, what
a body says when it is sent): every path and method goes to one handler.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager

from aiohttp import web

from vkpy.kube.access import Access
from vkpy.kube.client import ClientOptions, KubeClient

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


@asynccontextmanager
async def client_of(handler: Handler, max_connections: int) -> AsyncIterator[KubeClient]:
    """A client with `max_connections` requests in flight, to a server of `handler`."""
    app = web.Application()
    app.router.add_route("*", "/{tail:.*}", handler)
    runner = web.AppRunner(app, handler_cancellation=True, shutdown_timeout=1)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    client = KubeClient.open(
        Access(f"http://127.0.0.1:{port}", None), ClientOptions(max_connections=max_connections)
    )
    try:
        yield client
    finally:
        await client.close()
        await runner.cleanup()
