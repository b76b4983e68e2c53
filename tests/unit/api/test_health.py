"""The pod's probe endpoints: 200 with every check listed while all pass; 503 naming
the failed check (and a check that raises counts as failed, never a 500)."""

from __future__ import annotations

import aiohttp

from vkpy.api.health import HealthServer


async def test_healthz_and_readyz_report_each_check() -> None:
    problem: list[str | None] = [None]

    def boom() -> str | None:
        raise RuntimeError("broken check")

    server = HealthServer(
        "127.0.0.1", 0, live={"loops": lambda: None}, ready={"api": lambda: problem[0]}
    )
    await server.start()
    base = f"http://127.0.0.1:{server.port}"
    try:
        async with aiohttp.ClientSession() as session:
            async with session.get(base + "/readyz") as answer:
                assert answer.status == 200
                assert await answer.text() == "[+]loops ok\n[+]api ok\nok\n"
            problem[0] = "503 Unreachable: api server down"
            async with session.get(base + "/readyz") as answer:
                assert answer.status == 503
                assert "[-]api: 503 Unreachable: api server down" in await answer.text()
            async with session.get(base + "/healthz") as answer:
                assert answer.status == 200  # readiness problems do not restart the pod
        server2 = HealthServer("127.0.0.1", 0, live={"loops": boom}, ready={})
        await server2.start()
        try:
            async with (
                aiohttp.ClientSession() as session,
                session.get(f"http://127.0.0.1:{server2.port}/healthz") as answer,
            ):
                assert answer.status == 503
                assert "RuntimeError: broken check" in await answer.text()
        finally:
            await server2.close()
    finally:
        await server.close()
