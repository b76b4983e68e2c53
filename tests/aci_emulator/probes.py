"""The emulator's probes: a container's liveness and readiness probes, run as ACI runs them.

ACI runs a container group's exec and httpGet probes itself: a liveness probe that
fails `failureThreshold` times in a row gets the container killed and restarted by
the group's policy (its restart count goes up, an `Unhealthy` and a `Killing` event
in the container's instance view); a failing readiness probe only leaves an
`Unhealthy` event (ACI's instance view has no readiness field). Containers are
local processes here, so an exec probe runs its command with the container's
environment and directory, and an httpGet probe asks 127.0.0.1 on the probe's port.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable
from pathlib import Path

import aiohttp
from azure.mgmt.containerinstance import models

DEFAULT_PERIOD = 10
DEFAULT_TIMEOUT = 1
DEFAULT_FAILURES = 3


async def check(probe: models.ContainerProbe, env: dict[str, str], cwd: Path) -> str | None:
    """Run a probe once: None when it passed, else why it failed."""
    timeout = probe.timeout_seconds or DEFAULT_TIMEOUT
    if probe.exec_property is not None:
        argv = list(probe.exec_property.command or [])
        try:
            process = await asyncio.create_subprocess_exec(
                *argv,
                stdin=asyncio.subprocess.DEVNULL,
                stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.STDOUT,
                cwd=cwd,
                env=env,
            )
        except OSError as error:
            return f"exec {argv!r}: {error.strerror}"
        try:
            output, _ = await asyncio.wait_for(process.communicate(), timeout)
        except TimeoutError:
            with contextlib.suppress(ProcessLookupError):
                process.kill()
            await process.wait()
            return f"command {argv!r} timed out after {timeout}s"
        if process.returncode != 0:
            text = output.decode(errors="replace").strip()
            return f"command {argv!r} exited with {process.returncode}: {text}".rstrip(": ")
        return None
    if probe.http_get is not None:
        get = probe.http_get
        url = f"http://127.0.0.1:{get.port}{get.path or '/'}"
        headers = {h.name: h.value for h in get.http_headers or [] if h.name}
        try:
            async with (
                aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=timeout)) as session,
                session.get(url, headers=headers) as answer,
            ):
                if 200 <= answer.status < 400:
                    return None
                return f"HTTP probe failed with statuscode: {answer.status}"
        except (TimeoutError, aiohttp.ClientError, OSError) as error:
            return f'Get "{url}": {error or type(error).__name__}'
    return None


async def watch(
    kind: str,
    probe: models.ContainerProbe,
    env: dict[str, str],
    cwd: Path,
    report: Callable[[str, str, str], None],
    on_failed: Callable[[], Awaitable[None]] | None,
    sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
) -> None:
    """Probe while the container runs (cancel to stop); `on_failed` after
    failureThreshold failures in a row (liveness), then stop probing."""
    await sleep(probe.initial_delay_seconds or 0)
    period = probe.period_seconds or DEFAULT_PERIOD
    threshold = probe.failure_threshold or DEFAULT_FAILURES
    failures = 0
    while True:
        why = await check(probe, env, cwd)
        if why is None:
            failures = 0
        else:
            failures += 1
            report("Unhealthy", f"{kind} probe failed: {why}", "Warning")
            if on_failed is not None and failures >= threshold:
                await on_failed()
                return
        await sleep(period)
