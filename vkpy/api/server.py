"""The kubelet HTTPS API server: one aiohttp application inside vkpy's event loop.

`KubeletServer.run` is one of the runner's named root tasks. It sets up the serving
certificate (files, cluster CSR, or self-signed), the client CA, authentication and
authorization, then listens with aiohttp's AppRunner behind vkpy.api.listener (its
deadlines and connection caps; not `run_app`, the loop is vkpy's), and keeps
certificates fresh until it is cancelled. An address that cannot be had ends vkpy
with one line naming it and the flag that changes it (`ListenError`). Handlers are
cancelled when their client goes away (`handler_cancellation`), which is how a
`kubectl logs -f` that ends stops reading the backend. Optionally a second, plain
HTTP site serves only /metrics and /healthz, for in-cluster scrapers that cannot
present credentials.
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import replace
from pathlib import Path

from aiohttp import web
from aiohttp.http_exceptions import HttpProcessingError

from vkpy.api.auth.authn import Authenticator, TokenReviewer
from vkpy.api.auth.authz import AlwaysAllow, Authorizer, WebhookAuthorizer
from vkpy.api.auth.middleware import auth_middleware, count_requests, node_routing
from vkpy.api.certs.csr import CertificateRotator
from vkpy.api.certs.serving import (
    WatchedFiles,
    client_ca_file,
    file_certificate,
    self_signed_pair,
    warn_self_signed,
)
from vkpy.api.certs.tls import ServingTLS
from vkpy.api.endpoints.stats import StatsSampler
from vkpy.api.listener import ConnectionGate, drop_server_header, listen, track_requests
from vkpy.api.routes import add_metrics_routes, add_routes
from vkpy.api.settings import ApiDependencies, ApiSettings
from vkpy.api.state import DEPS, STATS
from vkpy.api.streaming.audit import audit_streams
from vkpy.core import open_files
from vkpy.core.clock import SYSTEM_CLOCK, Clock

log = logging.getLogger(__name__)

SHUTDOWN_TIMEOUT = 2.0
MAX_BODY = 1024 * 1024


class _QuietClientErrors(logging.Filter):
    """aiohttp logs a request it cannot parse (an oversized header line, garbage
    instead of HTTP) at error level with a traceback; the client gets its 400 and
    such noise is the client's fault, so it is logged at debug level instead."""

    def filter(self, record: logging.LogRecord) -> bool:
        error = record.exc_info[1] if record.exc_info else None
        if isinstance(error, HttpProcessingError) and record.levelno > logging.DEBUG:
            log.debug("malformed request refused", extra={"error": str(error).strip()})
            return False
        return True


logging.getLogger("aiohttp.server").addFilter(_QuietClientErrors())


def _bound_port(runner: web.AppRunner) -> int:
    address = runner.addresses[0]
    return int(address[1])


def _listening_port(server: asyncio.Server) -> int:
    return int(server.sockets[0].getsockname()[1])


class KubeletServer:
    """The API on `settings.listen_address:port`; `port` is known once `listening`."""

    def __init__(
        self,
        settings: ApiSettings,
        deps: ApiDependencies,
        *,
        clock: Clock = SYSTEM_CLOCK,
    ) -> None:
        self.settings = settings
        self.deps = deps
        self._clock = clock
        self.tls = ServingTLS(
            verify_client=bool(settings.client_ca_file or deps.default_client_ca),
            options=settings.tls,
        )
        self.stats = StatsSampler(deps.node_name)
        self._samplers: dict[str, StatsSampler] = {deps.node_name: self.stats}
        self.rotator: CertificateRotator | None = None
        self.port: int | None = None
        self.gate: ConnectionGate | None = None
        self.metrics_port: int | None = None
        self.listening = asyncio.Event()

    # --- pieces ---------------------------------------------------------------------

    def sampler(self, node: str) -> StatsSampler:
        """The stats sampler of one node of a set (each keeps its own counters)."""
        found = self._samplers.get(node)
        if found is None:
            found = self._samplers[node] = StatsSampler(node)
        return found

    def authorizer(self) -> Authorizer:
        if self.settings.authorization_mode == "AlwaysAllow":
            log.warning(
                "AUTHORIZATION IS OFF (--authorization-mode=AlwaysAllow): anyone who can "
                "authenticate to this node can read every pod's logs and stats. "
                "Development only."
            )
            return AlwaysAllow()
        return WebhookAuthorizer(
            self.deps.client, self.settings.authz_allow_ttl, self.settings.authz_deny_ttl
        )

    def application(self) -> web.Application:
        settings = self.settings
        if settings.anonymous_auth:
            log.warning("anonymous requests are allowed (--anonymous-auth=true)")
        authn = Authenticator(
            TokenReviewer(self.deps.client, settings.authn_cache_ttl), settings.anonymous_auth
        )
        app = web.Application(
            middlewares=[
                track_requests,
                count_requests,
                audit_streams,
                node_routing(self.deps, self.sampler),
                auth_middleware(authn, self.authorizer()),
            ],
            client_max_size=MAX_BODY,
        )
        app.on_response_prepare.append(drop_server_header)
        app[DEPS] = self.deps
        app[STATS] = self.stats
        add_routes(app)
        return app

    def _certificates(self) -> list[WatchedFiles]:
        """Load the client CA and serving certificate; what to watch for changes."""
        settings = self.settings
        watched: list[WatchedFiles] = []
        if settings.client_ca_file:
            watched.append(client_ca_file(self.tls, settings.client_ca_file))
        elif self.deps.default_client_ca:
            self.tls.trust_clients(self.deps.default_client_ca)
            log.info("client certificates are verified against the cluster CA")
        else:
            log.warning(
                "no client CA (--client-ca-file, or a CA in the kubeconfig): "
                "client certificates are not accepted, only bearer tokens"
            )
        cert_dir = Path(settings.cert_dir)
        if settings.tls_cert_file and settings.tls_private_key_file:
            watched.append(
                file_certificate(self.tls, settings.tls_cert_file, settings.tls_private_key_file)
            )
        elif settings.rotate_server_certificates:
            self.rotator = CertificateRotator(
                self.deps.client,
                self.tls,
                self.deps.events,
                self.deps.node_name,
                self.deps.addresses,
                cert_dir,
                clock=self._clock,
            )
        else:
            pair = self_signed_pair(cert_dir, self.deps.node_name, self.deps.addresses)
            self.tls.serve(pair)
            warn_self_signed(cert_dir)
        return watched

    # --- running ------------------------------------------------------------------------

    async def run(self) -> None:
        watched = self._certificates()
        runner = web.AppRunner(
            self.application(),
            handler_cancellation=True,
            access_log=None,
            shutdown_timeout=SHUTDOWN_TIMEOUT,
        )
        metrics_runner: web.AppRunner | None = None
        listening: asyncio.Server | None = None
        more: list[asyncio.Server] = []
        await runner.setup()
        try:
            assert runner.server is not None
            limits = self.settings.limits
            budget = limits.max_connections_process or open_files.connection_budget(
                open_files.soft_limit()
            )
            process = ConnectionGate(
                replace(limits, max_connections=budget, max_connections_per_client=budget),
                total_cap="process",
            )
            listening, self.gate = await listen(
                runner.server,
                self.settings.listen_address,
                self.settings.port,
                self.tls.context,
                limits,
                ConnectionGate(limits, parent=process),
            )
            self.port = _listening_port(listening)
            for port in sorted(set(self.deps.node_ports) - {self.port}):
                # A node set: each node's own port, with a kubelet's connection caps of
                # its own. A client such as metrics-server keeps a connection to every
                # node; caps shared by the set reset all but 256 of them (issue 17).
                # All count against the process's share of its open files.
                server, _ = await listen(
                    runner.server,
                    self.settings.listen_address,
                    port,
                    self.tls.context,
                    limits,
                    ConnectionGate(limits, parent=process),
                )
                more.append(server)
            log.info(
                "kubelet API listening",
                extra={
                    "address": self.settings.listen_address,
                    "port": self.port,
                    "node_ports": len(more),
                    "authorization": self.settings.authorization_mode,
                },
            )
            if self.settings.metrics_port:
                metrics_runner = await self._start_metrics()
            self.listening.set()
            async with asyncio.TaskGroup() as group:
                for files in watched:
                    group.create_task(
                        files.watch(self.settings.reload_interval, self._clock),
                        name="kubelet-api-reload",
                    )
                if self.rotator is not None:
                    group.create_task(self.rotator.run(), name="kubelet-api-certificates")
                await asyncio.Event().wait()
        finally:
            for one in (*more, *([listening] if listening is not None else [])):
                one.close()
            if metrics_runner is not None:
                await metrics_runner.cleanup()
            await runner.cleanup()

    async def _start_metrics(self) -> web.AppRunner:
        app = web.Application(middlewares=[count_requests])
        app.on_response_prepare.append(drop_server_header)
        add_metrics_routes(app)
        runner = web.AppRunner(app, access_log=None, shutdown_timeout=SHUTDOWN_TIMEOUT)
        await runner.setup()
        site = web.TCPSite(
            runner,
            self.settings.metrics_bind_address,
            self.settings.metrics_port,
            reuse_address=True,
        )
        try:
            await site.start()
        except BaseException:
            await runner.cleanup()
            raise
        self.metrics_port = _bound_port(runner)
        log.info(
            "metrics listening (plain HTTP)",
            extra={"address": self.settings.metrics_bind_address, "port": self.metrics_port},
        )
        return runner
