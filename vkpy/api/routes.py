"""The kubelet API's URL map and its small handlers.

Paths and methods are the kubelet's (pkg/kubelet/server): /healthz, /pods,
/runningpods/, /stats/summary, /metrics, /metrics/resource, /containerLogs, and the
stream endpoints /exec, /attach, /portForward (and /run), each with its pod-UID form.
The stream endpoints sit behind the same authentication middleware: /exec and
/attach are vkpy.api.remotecommand, /portForward vkpy.api.portforward, and /run still
answers 501. Container logs are in vkpy.api.logs. Backends without stats get a 501
that names the backend.
"""

from __future__ import annotations

import json
import logging
import time

import prometheus_client
from aiohttp import web
from aiohttp.typedefs import Handler

from vkpy.api import resource_metrics
from vkpy.api.logs import container_logs
from vkpy.api.portforward import port_forward_handler
from vkpy.api.remotecommand import attach_handler, exec_handler
from vkpy.api.state import DEPS, STATS, plain
from vkpy.objects import KubeObject, meta, spec, status
from vkpy.providers.base import PodStats, StatsProvider
from vkpy.providers.errors import ProviderError

log = logging.getLogger(__name__)


def _compact(value: object) -> str:
    return json.dumps(value, separators=(",", ":"))


STREAM_KINDS = ("exec", "attach", "portForward", "run")
STREAM_HANDLERS: dict[str, Handler] = {
    "exec": exec_handler,
    "attach": attach_handler,
    "portForward": port_forward_handler,
}


async def healthz(_: web.Request) -> web.Response:
    return plain(200, "ok")


def _pod_list(items: list[KubeObject]) -> KubeObject:
    return {"kind": "PodList", "apiVersion": "v1", "metadata": {}, "items": items}


async def pods(request: web.Request) -> web.Response:
    return web.json_response(dumps=_compact, data=_pod_list(request.app[DEPS].pods()))


async def running_pods(request: web.Request) -> web.Response:
    """Pods whose containers run, in the minimal shape the kubelet reports them: from
    the backend when the node gives its list, as the kubelet asks its runtime."""
    backend_view = request.app[DEPS].running_pods
    if backend_view is not None:
        return web.json_response(dumps=_compact, data=_pod_list(await backend_view()))
    items: list[KubeObject] = []
    for pod in request.app[DEPS].pods():
        running = {
            c.get("name")
            for c in status(pod).get("containerStatuses") or ()
            if "running" in (c.get("state") or {})
        }
        if not running:
            continue
        m = meta(pod)
        items.append(
            {
                "metadata": {
                    "name": m.get("name"),
                    "namespace": m.get("namespace"),
                    "uid": m.get("uid"),
                },
                "spec": {
                    "containers": [
                        {"name": c.get("name"), "image": c.get("image")}
                        for c in spec(pod).get("containers") or ()
                        if c.get("name") in running
                    ]
                },
                "status": {},
            }
        )
    return web.json_response(dumps=_compact, data=_pod_list(items))


async def _samples(request: web.Request) -> list[PodStats] | web.Response:
    provider = request.app[DEPS].provider
    if not isinstance(provider, StatsProvider):
        return plain(501, f"the {provider.name} backend does not provide stats")
    try:
        return list(await provider.pod_stats())
    except ProviderError as error:
        log.error("backend stats failed", extra={"error": str(error)})
        return plain(500, f"Internal Error: {error}")


def _known_uids(request: web.Request) -> set[str]:
    return {str(meta(p).get("uid")) for p in request.app[DEPS].pods()}


async def stats_summary(request: web.Request) -> web.Response:
    samples = await _samples(request)
    if isinstance(samples, web.Response):
        return samples
    summary = request.app[STATS].summary(samples, _known_uids(request))
    return web.json_response(dumps=_compact, data=summary)


async def metrics_resource(request: web.Request) -> web.Response:
    provider = request.app[DEPS].provider
    if not isinstance(provider, StatsProvider):
        return plain(501, f"the {provider.name} backend does not provide stats")
    now = time.time()
    try:
        samples = list(await provider.pod_stats())
    except ProviderError as error:
        log.error("backend stats failed", extra={"error": str(error)})
        text = resource_metrics.render(None, int(now * 1000))
    else:
        summary = request.app[STATS].summary(samples, _known_uids(request), now=now)
        starts = {
            (s.ref.namespace, s.ref.name, c.name): c.start_time.timestamp()
            for s in samples
            for c in s.containers
        }
        text = resource_metrics.render(summary, int(now * 1000), starts)
    return web.Response(body=text.encode(), headers={"Content-Type": resource_metrics.CONTENT_TYPE})


async def own_metrics(_: web.Request) -> web.Response:
    """vkpy's own metrics (prometheus-client's default registry)."""
    body = prometheus_client.generate_latest(prometheus_client.REGISTRY)
    return web.Response(body=body, headers={"Content-Type": prometheus_client.CONTENT_TYPE_LATEST})


def _not_yet(kind: str) -> Handler:
    async def handler(_: web.Request) -> web.Response:
        return plain(501, f"{kind} is not implemented by vkpy yet")

    return handler


def add_routes(app: web.Application) -> None:
    router = app.router
    router.add_get("/healthz", healthz)
    router.add_get("/pods", pods)
    router.add_get("/pods/", pods)
    router.add_get("/runningpods/", running_pods)
    router.add_get("/stats/summary", stats_summary)
    router.add_get("/stats/summary/", stats_summary)
    router.add_get("/metrics", own_metrics)
    router.add_get("/metrics/resource", metrics_resource)
    router.add_get("/containerLogs/{namespace}/{pod}/{container}", container_logs)
    for kind in STREAM_KINDS:
        handler = STREAM_HANDLERS.get(kind) or _not_yet(kind)
        if kind == "portForward":
            shapes = ["/{namespace}/{pod}", "/{namespace}/{pod}/{uid}"]
        else:
            shapes = ["/{namespace}/{pod}/{container}", "/{namespace}/{pod}/{uid}/{container}"]
        methods = ("POST",) if kind == "run" else ("GET", "POST")
        for shape in shapes:
            for method in methods:
                router.add_route(method, f"/{kind}{shape}", handler)


def add_metrics_routes(app: web.Application) -> None:
    """The plain-HTTP metrics port: /metrics and /healthz only."""
    app.router.add_get("/metrics", own_metrics)
    app.router.add_get("/healthz", healthz)
