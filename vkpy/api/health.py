"""The vkpy process's own health, for the liveness and readiness probes of its pod.

The kubelet API (:10250) is TLS with authentication, and only the leader serves it;
a kubelet probing the vkpy pod needs plain HTTP that every replica answers. So this
small site on `--health-port` answers `/healthz` (liveness: the process's loops are
turning; a failure restarts the pod) and `/readyz` (readiness: this replica can reach
the API server, and, when leading, its node is registered and its status written).
Each check returns None when fine or a one-line problem; a failing endpoint answers
503 with one `[-]name: problem` line per failed check, like the Kubernetes components.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping

from aiohttp import web

log = logging.getLogger(__name__)

Check = Callable[[], str | None]


def _answer(checks: Mapping[str, Check]) -> web.Response:
    lines, failed = [], False
    for name, check in checks.items():
        try:
            problem = check()
        except Exception as error:  # a broken check is a failed check, never a 500
            problem = f"{type(error).__name__}: {error}"
        failed |= problem is not None
        lines.append(f"[+]{name} ok" if problem is None else f"[-]{name}: {problem}")
    body = "\n".join([*lines, "failed" if failed else "ok"]) + "\n"
    return web.Response(status=503 if failed else 200, text=body)


class HealthServer:
    """Plain-HTTP /healthz and /readyz on `address:port` (port 0: any free port)."""

    def __init__(
        self,
        address: str,
        port: int,
        live: Mapping[str, Check],
        ready: Mapping[str, Check],
    ) -> None:
        self._address = address
        self._port = port
        self._live = live
        self._ready = ready
        self._runner: web.AppRunner | None = None
        self.port: int | None = None

    async def start(self) -> None:
        async def healthz(_: web.Request) -> web.Response:
            return _answer(self._live)

        async def readyz(_: web.Request) -> web.Response:
            return _answer({**self._live, **self._ready})

        app = web.Application()
        app.router.add_get("/healthz", healthz)
        app.router.add_get("/readyz", readyz)
        runner = web.AppRunner(app, access_log=None)
        await runner.setup()
        site = web.TCPSite(runner, self._address, self._port, reuse_address=True)
        try:
            await site.start()
        except BaseException:
            await runner.cleanup()
            raise
        self._runner = runner
        self.port = int(runner.addresses[0][1])
        log.info("health endpoint listening", extra={"address": self._address, "port": self.port})

    async def close(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None
