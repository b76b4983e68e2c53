"""HTTP probes and redirects, as the kubelet's prober treats them (issue 18: vkpy
followed no redirect and counted every 3xx as success, so a liveness probe
redirected to a failing local path never failed, and a redirect to another host
gave no `ProbeWarning`). A redirect to the same host is followed (at most 10); one
to another host ends the probe as a success with a warning holding the response's
body. A real HTTP server on loopback answers.
"""

from __future__ import annotations

import sys
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from aiohttp import web

from vkpy.providers.process.actions import Actions
from vkpy.providers.process.layout import InstanceDir


async def _redirect(request: web.Request) -> web.Response:
    return web.Response(
        status=302,
        headers={"Location": request.query["loc"]},
        text=f'<a href="{request.query["loc"]}">Found</a>.\n\n',
    )


async def _loop(request: web.Request) -> web.Response:
    raise web.HTTPFound("/loop")


async def _failing(request: web.Request) -> web.Response:
    return web.Response(status=500, text="unhealthy")


@pytest.fixture
async def port() -> AsyncIterator[int]:
    app = web.Application()
    app.add_routes(
        [web.get("/redirect", _redirect), web.get("/loop", _loop), web.get("/healthz", _failing)]
    )
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    server = site._server
    assert server is not None and server.sockets
    yield int(server.sockets[0].getsockname()[1])
    await runner.cleanup()


async def _probe(port: int, path: str, tmp_path: Path) -> tuple[bool, str, str]:
    actions = Actions(sys.executable, "127.0.0.1")
    try:
        handler = {"httpGet": {"path": path, "port": port}}
        outcome = await actions.run(handler, {}, InstanceDir(tmp_path, 0), 5.0, "127.0.0.1")
    finally:
        await actions.close()
    return outcome.ok, outcome.message, outcome.warning


async def test_a_local_redirect_is_followed_to_its_answer(port: int, tmp_path: Path) -> None:
    ok, message, _ = await _probe(port, "/redirect?loc=%2Fhealthz", tmp_path)
    assert not ok
    assert message.startswith("HTTP probe failed with statuscode: 500")


async def test_a_redirect_to_another_host_succeeds_with_a_warning(
    port: int, tmp_path: Path
) -> None:
    ok, _, warning = await _probe(port, "/redirect?loc=http%3A%2F%2F0.0.0.0%2F", tmp_path)
    assert ok
    assert warning.startswith(
        'Probe terminated redirects, Response body: <a href="http://0.0.0.0/">Found</a>.'
    )


async def test_endless_local_redirects_fail(port: int, tmp_path: Path) -> None:
    ok, message, _ = await _probe(port, "/loop", tmp_path)
    assert not ok and "stopped after 10 redirects" in message
