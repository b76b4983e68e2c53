"""Requests to the API server go out in the order they were made, a pool's worth at a
time, and a watch does not take a request's turn (issue 30).

A pod burst's workers each send their next status patch the moment the last one
returns. With aiohttp's own pool limit, a request queued for a connection lost it to
every such newcomer: in a burst of 1000 pods the first 35 patches waited 3.4 s, until
the burst was over. A local aiohttp server on 127.0.0.1 plays the API server and
records the order requests reach it.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest
from aiohttp import web

from tests.unit.local_api import client_of
from vkpy.kube.client import KubeClient


class Server:
    def __init__(self) -> None:
        self.arrived: list[str] = []
        self.watch_open = asyncio.Event()

    async def handle(self, request: web.Request) -> web.StreamResponse:
        if request.query.get("watch") == "true":
            response = web.StreamResponse()
            await response.prepare(request)
            self.watch_open.set()
            await asyncio.sleep(3600)  # a watch with nothing to say
            return response
        self.arrived.append(request.path.rsplit("/", 1)[-1])
        await asyncio.sleep(0.002)
        return web.json_response({})


@pytest.fixture
async def served() -> AsyncIterator[tuple[Server, KubeClient]]:
    server = Server()
    async with client_of(server.handle, max_connections=2) as client:
        yield server, client


async def test_a_queued_request_is_not_overtaken_by_a_workers_next_ones(
    served: tuple[Server, KubeClient],
) -> None:
    server, client = served

    async def worker(n: int) -> None:
        for i in range(40):
            await client.patch(f"/api/v1/worker-{n}-{i}", {})

    workers = [asyncio.create_task(worker(n)) for n in range(4)]
    while len(server.arrived) < 10:  # the workers keep both connections busy
        await asyncio.sleep(0.001)
    ahead = len(server.arrived)
    await client.get("/api/v1/early")
    await asyncio.gather(*workers)
    # first come, first served: only the four workers' requests already waiting (and
    # the two on the wire) may reach the server before it, not the rest of the burst
    assert server.arrived.index("early") - ahead <= 6, server.arrived.index("early") - ahead
    assert len(server.arrived) == 161


async def test_a_watch_leaves_every_turn_to_the_requests(
    served: tuple[Server, KubeClient],
) -> None:
    server, client = served

    async def watch() -> None:
        async for _ in client.stream_lines("/api/v1/pods", {"watch": True}, timeout=3600):
            pass

    watching = [asyncio.create_task(watch()) for _ in range(3)]
    try:
        await asyncio.wait_for(server.watch_open.wait(), 5)
        answers = await asyncio.wait_for(
            asyncio.gather(*(client.get(f"/api/v1/r{i}") for i in range(4))), 5
        )
        assert answers == [{}] * 4
    finally:
        for task in watching:
            task.cancel()
        await asyncio.gather(*watching, return_exceptions=True)
