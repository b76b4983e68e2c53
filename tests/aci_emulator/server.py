"""The emulator's HTTPS server: ARM routes of Microsoft.ContainerInstance, Monitor
metrics, token endpoints and terminals, with faults on cue.

Every ARM request needs a token the emulator issued for ARM's audience and an
api-version the service knows; bodies are parsed with the SDK's generated models
and checked against ACI's limits (`limits`); answers are ARM-shaped, including
long-running operations (201 + `Azure-AsyncOperation`, polled until Succeeded or
Failed). `Faults` makes it misbehave: a share of calls throttled (429 with
Retry-After) or failing (503), a quota of groups. `AciEmulator` runs it in a thread
of its own for tests and the bench; its methods act like the platform behind
vkpy's back (evict a Spot group, delete a group).
"""

from __future__ import annotations

import asyncio
import json
import random
import secrets
import ssl
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from aiohttp import web
from azure.core.exceptions import DeserializationError
from azure.mgmt.containerinstance import models
from azure.mgmt.monitor import models as monitor

from tests.aci_emulator import limits
from tests.aci_emulator.groups import Group, Lifecycle, Timing
from tests.aci_emulator.identity import Directory
from tests.aci_emulator.limits import ArmError
from tests.aci_emulator.terminal import Session, Terminals
from vkpy.devcluster.pki import CertificateAuthority, write_pem

API_VERSIONS = {"2021-09-01", "2021-10-01", "2022-09-01", "2022-10-01-preview", "2023-05-01"}
MONITOR_API_VERSIONS = {"2018-01-01", "2019-07-01", "2021-05-01", "2023-10-01", "2024-02-01"}
PROVIDER = "/providers/Microsoft.ContainerInstance"
GROUP = "/subscriptions/{sub}/resourceGroups/{rg}" + PROVIDER + "/containerGroups/{name}"


@dataclass
class Faults:
    """Misbehaviour on cue (shares are 0..1 of ARM calls)."""

    throttle: float = 0.0
    server_error: float = 0.0
    retry_after: float = 1.0
    max_groups: int | None = None
    operation_delay: float = 0.0
    """Extra seconds an async operation stays InProgress."""
    fail_next: list[int] = field(default_factory=list)
    """Statuses (429 or 503) the next ARM calls are answered with, one each, with
    Retry-After `retry_after`: a deterministic share of throttling and 5xx."""
    deployment_failures: list[str] = field(default_factory=list)
    """Codes the next deployments fail with after ARM accepted them, one each, as ACI's
    capacity and quota failures arrive (`ServiceUnavailable`,
    `ContainerGroupQuotaReached`): the group ends provisioning Failed."""


@dataclass
class Operation:
    group: Group
    started: float
    status: str = "InProgress"


@dataclass
class Store:
    subscription: str = "2b0c1e6a-0000-4000-8000-00000000ac1d"
    resource_groups: set[str] = field(default_factory=lambda: {"vkpy-rg"})
    groups: dict[tuple[str, str], Group] = field(default_factory=dict)
    operations: dict[str, Operation] = field(default_factory=dict)
    calls: Counter[str] = field(default_factory=Counter)
    answered: list[tuple[float, str, int]] = field(default_factory=list)
    """(monotonic time, route, status) of each ARM call as it was answered."""


def _error(error: ArmError, headers: dict[str, str] | None = None) -> web.Response:
    return web.json_response(error.body(), status=error.status, headers=headers)


def capacity_error(code: str, location: str) -> ArmError:
    """A deployment's failure after ARM accepted it, in ACI's words."""
    if code == "ContainerGroupQuotaReached":
        return ArmError(
            409,
            code,
            "Resource type 'Microsoft.ContainerInstance/containerGroups' container group "
            f"quota exceeded in region '{location}'. Limit: 'StandardCores'.",
        )
    return ArmError(
        409,
        code,
        f"The requested resource is not available in the location '{location}' at this "
        "moment. Please retry with a different resource request or in another location.",
    )


def _not_found(kind: str, name: str) -> ArmError:
    return ArmError(
        404, "ResourceNotFound", f"The Resource '{kind}/{name}' under resource group was not found."
    )


class Emulator:
    """The aiohttp application and the state behind it."""

    def __init__(self, workdir: Path, url: Callable[[], str]) -> None:
        self.store = Store()
        self.directory = Directory()
        self.faults = Faults()
        self.timing = Timing()
        self.registries: dict[str, tuple[str, str]] = {}
        self.unreachable_images: set[str] = set()
        self.lifecycle = Lifecycle(self.timing, self.registries, self.unreachable_images)
        self.terminals = Terminals()
        self.workdir = workdir
        self.url = url

    def app(self) -> web.Application:
        app = web.Application(middlewares=[self._arm])
        tenant = "/{tenant}/oauth2/v2.0/token"
        app.router.add_post(tenant, self.directory.token)
        app.router.add_get("/msi/token", self.directory.managed_identity)
        app.router.add_get("/terminal/{key}", self.terminals.handle)
        sub = "/subscriptions/{sub}"
        app.router.add_get(sub + PROVIDER + "/containerGroups", self.list_all)
        app.router.add_get(
            sub + "/resourceGroups/{rg}" + PROVIDER + "/containerGroups", self.list_rg
        )
        app.router.add_put(GROUP, self.put)
        app.router.add_get(GROUP, self.get)
        app.router.add_delete(GROUP, self.delete)
        app.router.add_post(GROUP + "/stop", self.stop)
        app.router.add_post(GROUP + "/restart", self.restart)
        app.router.add_get(GROUP + "/containers/{container}/logs", self.logs)
        app.router.add_post(GROUP + "/containers/{container}/exec", self.exec)
        app.router.add_post(GROUP + "/containers/{container}/attach", self.attach)
        app.router.add_get(GROUP + "/providers/Microsoft.Insights/metrics", self.metrics)
        app.router.add_get(sub + PROVIDER + "/locations/{loc}/operations/{op}", self.operation)
        return app

    # --- the checks every ARM call passes ---------------------------------------------

    @web.middleware
    async def _arm(
        self, request: web.Request, handler: Callable[[web.Request], Awaitable[web.StreamResponse]]
    ) -> web.StreamResponse:
        if not request.path.startswith("/subscriptions/"):
            return await handler(request)
        route = request.match_info.route.resource
        kind = f"{request.method} {route.canonical if route else request.path}"
        self.store.calls[kind] += 1
        response = await self._answer(request, handler)
        self.store.answered.append((time.monotonic(), kind, response.status))
        return response

    async def _answer(
        self,
        request: web.Request,
        handler: Callable[[web.Request], Awaitable[web.StreamResponse]],
    ) -> web.StreamResponse:
        """The checks every ARM call passes, the faults on cue, then the route."""
        if not self.directory.valid(request.headers.get("Authorization")):
            return web.json_response(
                ArmError(401, "AuthenticationFailed", "Authentication failed.").body(),
                status=401,
                headers={"WWW-Authenticate": 'Bearer error="invalid_token"'},
            )
        version = request.query.get("api-version")
        known = MONITOR_API_VERSIONS if "Microsoft.Insights" in request.path else API_VERSIONS
        if not version:
            return _error(
                ArmError(
                    400,
                    "MissingApiVersionParameter",
                    "The api-version query parameter (?api-version=) is required.",
                )
            )
        if version not in known:
            return _error(
                ArmError(
                    400,
                    "NoRegisteredProviderFound",
                    f"No registered resource provider found for API version "
                    f"'{version}'. Supported: {', '.join(sorted(known))}.",
                )
            )
        if request.match_info.get("sub") != self.store.subscription:
            return _error(
                ArmError(
                    404,
                    "SubscriptionNotFound",
                    f"The subscription '{request.match_info.get('sub')}' could not be found.",
                )
            )
        rg = request.match_info.get("rg")
        if rg is not None and rg not in self.store.resource_groups:
            return _error(
                ArmError(404, "ResourceGroupNotFound", f"Resource group '{rg}' could not be found.")
            )
        roll = random.random()
        retry = {
            "Retry-After": str(max(1, round(self.faults.retry_after))),
            "retry-after-ms": str(int(self.faults.retry_after * 1000)),
        }
        cue = self.faults.fail_next.pop(0) if self.faults.fail_next else None
        if cue is not None and cue not in (429, 503):
            raise ValueError(f"fail_next holds 429 or 503, not {cue}")
        if cue == 429 or (cue is None and roll < self.faults.throttle):
            self.store.calls["throttled"] += 1
            return _error(
                ArmError(
                    429,
                    "TooManyRequests",
                    "The request is being throttled as the limit has been "
                    "reached for operation type.",
                ),
                retry,
            )
        if cue == 503 or (cue is None and roll < self.faults.throttle + self.faults.server_error):
            self.store.calls["failed"] += 1
            return _error(
                ArmError(
                    503,
                    "ServiceUnavailable",
                    "The requested resource is not available in the location "
                    "at this moment. Please retry later.",
                ),
                retry,
            )
        try:
            return await handler(request)
        except ArmError as error:
            return _error(error)

    def _group(self, request: web.Request) -> Group:
        info = request.match_info
        group = self.store.groups.get((info["rg"], info["name"]))
        if group is None:
            raise _not_found("Microsoft.ContainerInstance/containerGroups", info["name"])
        return group

    # --- container groups -----------------------------------------------------------

    async def put(self, request: web.Request) -> web.Response:
        info = request.match_info
        try:
            body = await request.json()
        except json.JSONDecodeError as error:
            raise ArmError(
                400, "InvalidRequestContent", f"The request content was invalid: {error}"
            ) from None
        try:
            model = models.ContainerGroup.deserialize(body)
        except DeserializationError as error:
            raise ArmError(
                400, "InvalidRequestContent", f"The request content was invalid: {error}"
            ) from None
        problems = limits.missing_required(model) if model is not None else ["body"]
        if problems:
            raise ArmError(
                400,
                "InvalidRequestContent",
                "The request content was invalid and could not be deserialized: "
                f"Required property '{problems[0]}' not found.",
            )
        for container in model.containers:
            if container.resources is None or container.resources.requests is None:
                raise ArmError(
                    400,
                    "InvalidRequestContent",
                    f"Container '{container.name}' is missing resources.requests.",
                )
        limits.check_group(model, info["name"])
        key = (info["rg"], info["name"])
        existing = self.store.groups.get(key)
        quota = self.faults.max_groups
        if existing is None and quota is not None and len(self.store.groups) >= quota:
            raise ArmError(
                409,
                "ContainerGroupQuotaReached",
                f"Resource type 'Microsoft.ContainerInstance/containerGroups' "
                f"container group quota '{quota}' exceeded in region '{model.location}'.",
            )
        if existing is not None:
            redeploy = existing.provisioning == "Failed"  # ARM deploys a failed group again
            if existing.model.serialize() == model.serialize() and not redeploy:
                return web.json_response(existing.document(), status=200)
            await self.lifecycle.remove(existing)
        group = Group(
            self.store.subscription,
            info["rg"],
            info["name"],
            model,
            self.workdir / f"{info['rg']}-{info['name']}-{secrets.token_hex(3)}",
            created=time.time(),
        )
        if self.faults.deployment_failures:
            group.planned_error = capacity_error(
                self.faults.deployment_failures.pop(0), model.location or ""
            )
        self.lifecycle.prepare(group)
        group.task = asyncio.create_task(self.lifecycle.run(group))
        self.store.groups[key] = group
        op = secrets.token_hex(8)
        self.store.operations[op] = Operation(group, time.monotonic())
        location = model.location
        headers = {
            "Azure-AsyncOperation": f"{self.url()}/subscriptions/{self.store.subscription}"
            f"{PROVIDER}/locations/{location}/operations/{op}?api-version=2023-05-01",
            "Retry-After": "1",
            "retry-after-ms": str(max(100, int(self.timing.pending * 1000))),
        }
        return web.json_response(
            group.document(), status=201 if existing is None else 200, headers=headers
        )

    async def operation(self, request: web.Request) -> web.Response:
        op = self.store.operations.get(request.match_info["op"])
        if op is None:
            raise _not_found("operations", request.match_info["op"])
        group = op.group
        waited = time.monotonic() - op.started >= self.faults.operation_delay
        body: dict[str, Any] = {"id": request.path, "name": request.match_info["op"]}
        if group not in self.store.groups.values():
            body["status"] = "Canceled"
            body["error"] = {
                "code": "ContainerGroupDeleted",
                "message": "The container group was deleted during the deployment.",
            }
        elif group.provisioning == "Failed" and waited:
            body["status"] = "Failed"
            body["error"] = (
                group.error.body()["error"]
                if group.error
                else {"code": "Failed", "message": "The deployment failed."}
            )
        elif group.provisioning == "Succeeded" and waited:
            body["status"] = "Succeeded"
        else:
            body["status"] = "InProgress"
        op.status = body["status"]  # what the client was last told
        headers = {"retry-after-ms": "200"} if body["status"] == "InProgress" else {}
        return web.json_response(body, headers=headers)

    async def get(self, request: web.Request) -> web.Response:
        return web.json_response(self._group(request).document())

    def _listing(self, groups: list[Group], request: web.Request) -> web.Response:
        page_size = 50
        skip = int(request.query.get("$skiptoken", "0") or 0)
        page = groups[skip : skip + page_size]
        body: dict[str, Any] = {"value": [g.document(instance_view=False) for g in page]}
        if skip + page_size < len(groups):
            query = {**request.query, "$skiptoken": str(skip + page_size)}
            body["nextLink"] = str(request.url.with_query(query))
        answer = models.ContainerGroupListResult.deserialize(body)  # the SDK's shape of a page
        return web.json_response(answer.serialize(keep_readonly=True))

    async def list_all(self, request: web.Request) -> web.Response:
        return self._listing(list(self.store.groups.values()), request)

    async def list_rg(self, request: web.Request) -> web.Response:
        rg = request.match_info["rg"]
        return self._listing(
            [g for g in self.store.groups.values() if g.resource_group == rg], request
        )

    async def delete(self, request: web.Request) -> web.Response:
        info = request.match_info
        group = self.store.groups.pop((info["rg"], info["name"]), None)
        if group is None:
            return web.Response(status=204)
        await self.lifecycle.remove(group)
        return web.json_response(group.document(), status=200)

    async def stop(self, request: web.Request) -> web.Response:
        group = self._group(request)
        group.stopped = True
        group.state = "Stopped"
        await self.lifecycle.stop_containers(group)
        return web.Response(status=204)

    async def restart(self, request: web.Request) -> web.Response:
        group = self._group(request)
        await self.lifecycle.remove(group)
        group.stopped = False
        self.lifecycle.prepare(group)
        group.task = asyncio.create_task(self.lifecycle.run(group))
        return web.Response(status=204)

    # --- containers ----------------------------------------------------------------

    def _container(self, request: web.Request) -> tuple[Group, Any]:
        group = self._group(request)
        container = group.container(request.match_info["container"])
        if container is None:
            raise ArmError(
                404,
                "ContainerNotFound",
                f"The container '{request.match_info['container']}' could not be "
                f"found in container group '{group.name}'.",
            )
        return group, container

    async def logs(self, request: web.Request) -> web.Response:
        _, container = self._container(request)
        lines = list(container.logs)
        tail = request.query.get("tail")
        if tail is not None:
            lines = lines[-int(tail) :] if int(tail) > 0 else []
        stamps = request.query.get("timestamps", "false").lower() == "true"
        text = "".join(
            (f"{t.strftime('%Y-%m-%dT%H:%M:%S.%f')}000Z " if stamps else "")
            + data.decode(errors="replace")
            for t, data in lines
        )
        return web.json_response(models.Logs(content=text).serialize(keep_readonly=True))

    async def exec(self, request: web.Request) -> web.Response:
        group, container = self._container(request)
        try:
            asked = models.ContainerExecRequest.deserialize(await request.json())
        except (json.JSONDecodeError, DeserializationError) as error:
            raise ArmError(
                400, "InvalidRequestContent", f"The request content was invalid: {error}"
            ) from None
        command = asked.command if asked is not None else None
        if not isinstance(command, str) or not command:
            raise ArmError(400, "InvalidRequestContent", "command is required.")
        if container.current.state != "Running":
            raise ArmError(
                409,
                "ContainerGroupTransitioning"
                if group.provisioning != "Succeeded"
                else "ContainerNotRunning",
                f"The container '{container.name}' is not running.",
            )
        size = asked.terminal_size or models.ContainerExecRequestTerminalSize()
        session = Session(
            "exec",
            container,
            secrets.token_urlsafe(16),
            command,
            int(size.rows or 24),
            int(size.cols or 80),
        )
        return self._terminal(session)

    async def attach(self, request: web.Request) -> web.Response:
        _, container = self._container(request)
        if container.current.state != "Running":
            raise ArmError(
                409, "ContainerNotRunning", f"The container '{container.name}' is not running."
            )
        return self._terminal(Session("attach", container, secrets.token_urlsafe(16)))

    def _terminal(self, session: Session) -> web.Response:
        key = self.terminals.open(session)
        uri = self.url().replace("https://", "wss://") + f"/terminal/{key}"
        answer = (
            models.ContainerExecResponse(web_socket_uri=uri, password=session.password)
            if session.kind == "exec"
            else models.ContainerAttachResponse(web_socket_uri=uri, password=session.password)
        )
        return web.json_response(answer.serialize(keep_readonly=True))

    # --- metrics -------------------------------------------------------------------

    async def metrics(self, request: web.Request) -> web.Response:
        group = self._group(request)
        names = (request.query.get("metricnames") or "").split(",")
        stamp = datetime.now(UTC).replace(second=0, microsecond=0)
        value = []
        for metric in names:
            if metric not in ("CpuUsage", "MemoryUsage"):
                raise ArmError(
                    400,
                    "BadRequest",
                    f"Failed to find metric configuration for "
                    f"provider: Microsoft.ContainerInstance, "
                    f"metric: {metric}",
                )
            series = []
            for c in group.containers:
                cpu, memory = c.cpu_and_memory()
                started = c.current.start_time or stamp
                ran = max((datetime.now(UTC) - started).total_seconds(), 1e-3)
                average = cpu / ran * 1000 if metric == "CpuUsage" else float(memory)
                series.append(
                    monitor.TimeSeriesElement(
                        metadatavalues=[
                            monitor.MetadataValue(
                                name=monitor.LocalizableStringAutoGenerated(value="containername"),
                                value=c.name,
                            )
                        ],
                        data=[
                            monitor.MetricValue(
                                time_stamp=stamp - timedelta(minutes=1), average=average
                            )
                        ],
                    )
                )
            value.append(
                monitor.Metric(
                    id=f"{group.id}/providers/Microsoft.Insights/metrics/{metric}",
                    type="Microsoft.Insights/metrics",
                    name=monitor.LocalizableStringAutoGenerated(
                        value=metric, localized_value=metric
                    ),
                    unit="Count" if metric == "CpuUsage" else "Bytes",
                    timeseries=series,
                )
            )
        answer = monitor.Response(
            timespan=request.query.get("timespan", ""),
            interval=request.query.get("interval", "PT1M"),
            value=value,
            namespace="Microsoft.ContainerInstance/containerGroups",
            resourceregion=group.model.location,
        )
        return web.json_response(answer.serialize(keep_readonly=True))


class AciEmulator:
    """The emulator on https://127.0.0.1:<port>, run in a thread of its own."""

    def __init__(self) -> None:
        self._dir = Path(tempfile.mkdtemp(prefix="aci-emulator-"))
        ca = CertificateAuthority.create("vkpy ACI emulator CA")
        cert, key = ca.issue(
            "127.0.0.1", ip_addresses=["127.0.0.1"], dns_names=["localhost"], server=True
        )
        self.ca_path = self._dir / "ca.pem"
        write_pem(self.ca_path, ca.cert_pem)
        write_pem(self._dir / "server.pem", cert)
        write_pem(self._dir / "server-key.pem", key, secret=True)
        self.port = 0
        self.emulator = Emulator(self._dir / "groups", lambda: self.url)
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(
            target=self._loop.run_forever, name="aci-emulator", daemon=True
        )
        self._runner: web.AppRunner | None = None

    @property
    def url(self) -> str:
        return f"https://127.0.0.1:{self.port}"

    @property
    def faults(self) -> Faults:
        return self.emulator.faults

    @property
    def store(self) -> Store:
        return self.emulator.store

    @property
    def directory(self) -> Directory:
        return self.emulator.directory

    def call(self, coroutine: Awaitable[Any], timeout: float = 30) -> Any:
        async def wrap() -> Any:
            return await coroutine

        return asyncio.run_coroutine_threadsafe(wrap(), self._loop).result(timeout)

    def start(self) -> AciEmulator:
        self._thread.start()

        async def serve() -> int:
            context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
            context.load_cert_chain(self._dir / "server.pem", self._dir / "server-key.pem")
            # A client killed mid-stream (an exec, a log follow) leaves its handler open:
            # stopping waits for such handlers this long, not aiohttp's default minute.
            self._runner = web.AppRunner(self.emulator.app(), shutdown_timeout=2)
            await self._runner.setup()
            site = web.TCPSite(self._runner, "127.0.0.1", 0, ssl_context=context)
            await site.start()
            server = site._server
            assert server is not None
            return int(server.sockets[0].getsockname()[1])  # type: ignore[attr-defined]

        self.port = self.call(serve())
        return self

    def stop(self) -> None:
        """Remove every group (ending its processes) and stop; a second call does nothing."""
        if not self._thread.is_alive():
            return

        async def shutdown() -> None:
            groups = list(self.store.groups.values())
            self.store.groups.clear()
            await asyncio.gather(*(self.emulator.lifecycle.remove(g) for g in groups))
            if self._runner is not None:
                await self._runner.cleanup()

        self.call(shutdown(), timeout=120)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)

    # --- the platform acting behind vkpy's back --------------------------------------

    def group(self, name: str, rg: str = "vkpy-rg") -> Group | None:
        return self.store.groups.get((rg, name))

    def evict(self, name: str, rg: str = "vkpy-rg") -> None:
        """Take a Spot group's capacity back: its containers stop, an event says why."""

        async def evict() -> None:
            group = self.store.groups[(rg, name)]
            group.stopped = True
            await self.emulator.lifecycle.stop_containers(group)
            group.state = "Stopped"
            group.events.add(
                "SpotContainerGroupEvicted",
                "The Spot container group was evicted because Azure needed the capacity back.",
                "Warning",
            )

        self.call(evict())

    def delete_behind(self, name: str, rg: str = "vkpy-rg") -> None:
        async def delete() -> None:
            group = self.store.groups.pop((rg, name))
            await self.emulator.lifecycle.remove(group)

        self.call(delete())

    def create_orphan(self, name: str, tags: dict[str, str], rg: str = "vkpy-rg") -> None:
        """A group made by someone (a vkpy that forgot it): Running with these tags."""
        model = models.ContainerGroup(
            location="westeurope",
            os_type="Linux",
            tags=tags,
            restart_policy="Always",
            containers=[
                models.Container(
                    name="app",
                    image="busybox",
                    resources=models.ResourceRequirements(
                        requests=models.ResourceRequests(memory_in_gb=0.5, cpu=0.5)
                    ),
                )
            ],
        )

        async def create() -> None:
            group = Group(self.store.subscription, rg, name, model, self._dir / "groups" / name)
            self.emulator.lifecycle.prepare(group)
            group.task = asyncio.create_task(self.emulator.lifecycle.run(group))
            self.store.groups[(rg, name)] = group

        self.call(create())

    def environment(self) -> dict[str, str]:
        """Variables for a process whose azure-identity should use the emulator's
        managed identity endpoint (App Service's shape)."""
        return {
            "IDENTITY_ENDPOINT": f"{self.url}/msi/token",
            "IDENTITY_HEADER": self.directory.identity_header,
        }


__all__ = ["AciEmulator", "Faults"]
