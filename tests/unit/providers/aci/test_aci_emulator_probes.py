"""The emulator's probe checks (tests/aci_emulator/probes.py) against a real local
HTTP server and real processes: what passes and what fails, and why."""

from __future__ import annotations

import asyncio
from pathlib import Path

from aiohttp import web
from azure.mgmt.containerinstance import models

from tests.aci_emulator import probes


async def serve(status: int) -> tuple[web.AppRunner, int]:
    async def answer(request: web.Request) -> web.Response:
        assert request.headers.get("X-Probe") == "yes"
        return web.Response(status=status, text="ok")

    app = web.Application()
    app.router.add_get("/healthz", answer)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = runner.addresses[0][1]
    return runner, port


def http_probe(port: int) -> models.ContainerProbe:
    return models.ContainerProbe(
        http_get=models.ContainerHttpGet(
            path="/healthz",
            port=port,
            http_headers=[models.HttpHeader(name="X-Probe", value="yes")],
        )
    )


async def test_http_probe_passes_on_2xx_and_fails_on_5xx_and_refusal() -> None:
    good, good_port = await serve(200)
    bad, bad_port = await serve(500)
    try:
        assert await probes.check(http_probe(good_port), {}, Path("/")) is None
        why = await probes.check(http_probe(bad_port), {}, Path("/"))
        assert why == "HTTP probe failed with statuscode: 500"
    finally:
        await good.cleanup()
        await bad.cleanup()
    refused = await probes.check(http_probe(bad_port), {}, Path("/"))
    assert refused is not None and f"127.0.0.1:{bad_port}/healthz" in refused


async def test_exec_probe_runs_in_the_containers_directory(tmp_path: Path) -> None:
    (tmp_path / "healthy").write_text("yes")
    env = {"PATH": "/usr/bin:/bin"}
    ok = models.ContainerProbe(exec_property=models.ContainerExec(command=["cat", "healthy"]))
    assert await probes.check(ok, env, tmp_path) is None
    (tmp_path / "healthy").unlink()
    why = await probes.check(ok, env, tmp_path)
    assert why is not None and "exited with 1" in why and "healthy" in why


async def test_liveness_fails_after_threshold_failures_in_a_row(tmp_path: Path) -> None:
    probe = models.ContainerProbe(
        exec_property=models.ContainerExec(command=["false"]), failure_threshold=3
    )
    reported: list[tuple[str, str, str]] = []
    failed = asyncio.Event()

    async def on_failed() -> None:
        failed.set()

    async def no_wait(_: float) -> None:
        await asyncio.sleep(0)

    await probes.watch(
        "Liveness",
        probe,
        {"PATH": "/usr/bin:/bin"},
        tmp_path,
        lambda *event: reported.append(event),
        on_failed,
        no_wait,
    )
    assert failed.is_set()
    assert len(reported) == 3
    assert all(r[0] == "Unhealthy" and r[1].startswith("Liveness probe failed") for r in reported)
