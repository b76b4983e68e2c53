"""The kubelet API's URL map and its small handlers.

Paths and methods are the kubelet's (pkg/kubelet/server) and Virtual Kubelet's
(node/api): /healthz (and its checks), /pods, /runningpods, /stats/summary, /metrics,
/metrics/resource, /containerLogs, and the stream endpoints /exec, /attach,
/portForward, each with its pod-UID form; every one with or without a trailing slash,
as both routers accept. The stream endpoints sit behind the same authentication
middleware: /exec and /attach are vkpy.api.endpoints.exec_attach, /portForward
vkpy.api.endpoints.portforward. The kubelet's paths vkpy has nothing behind (/run, cAdvisor
and probe metrics, z-pages, pprof, node logs, checkpoints) answer 501 saying so.
Container logs are in vkpy.api.endpoints.logs. Backends without stats get a 501 that names
the backend.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time

import prometheus_client
from aiohttp import web
from aiohttp.typedefs import Handler

from vkpy.api.endpoints import pod_list, resource_metrics
from vkpy.api.endpoints.exec_attach import attach_handler, exec_handler
from vkpy.api.endpoints.logs import container_logs
from vkpy.api.endpoints.portforward import port_forward_handler
from vkpy.api.state import deps, plain, stats
from vkpy.core import jsoncodec
from vkpy.core.objects import KubeObject, containers_of, meta, status, uid_of
from vkpy.providers.base import PodStats, StatsProvider
from vkpy.providers.errors import ProviderError

log = logging.getLogger(__name__)


def _compact(value: object) -> str:
    return json.dumps(value, separators=(",", ":"))


STREAM_HANDLERS: dict[str, Handler] = {
    "exec": exec_handler,
    "attach": attach_handler,
    "portForward": port_forward_handler,
}


async def healthz(_: web.Request) -> web.Response:
    return plain(200, "ok")


def _pod_list(items: list[KubeObject]) -> web.Response:
    """A PodList (of `/runningpods`), encoded by orjson: the standard library's encoder
    held the event loop for seconds on large lists (issue 17). `/pods` reuses each
    pod's encoding instead (vkpy.api.endpoints.pod_list)."""
    body = {"kind": "PodList", "apiVersion": "v1", "metadata": {}, "items": items}
    return web.Response(body=jsoncodec.dumps(body), content_type="application/json")


async def pods(request: web.Request) -> web.StreamResponse:
    """The node's pods, each as the JSON its record holds (a settled pod's packed
    bytes: nothing decoded or encoded), joined and sent in chunks with the event loop
    free for others in between (vkpy.api.endpoints.pod_list)."""
    node = deps(request)
    if node.pod_documents is not None:
        pieces = node.pod_documents()
    else:
        pieces = [jsoncodec.dumps(pod) for pod in node.pods()]
    response = web.StreamResponse(headers={"Content-Type": "application/json"})
    response.content_length = pod_list.length(pieces)
    await response.prepare(request)
    for chunk in pod_list.chunks(pieces):
        await response.write(chunk)
        await asyncio.sleep(0)  # a turn for the other requests between chunks
    await response.write_eof()
    return response


async def running_pods(request: web.Request) -> web.Response:
    """Pods whose containers run, in the minimal shape the kubelet reports them: from
    the backend when the node gives its list, as the kubelet asks its runtime."""
    backend_view = deps(request).running_pods
    if backend_view is not None:
        return _pod_list(await backend_view())
    items: list[KubeObject] = []
    for pod in deps(request).pods():
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
                        for c in containers_of(pod)
                        if c.get("name") in running
                    ]
                },
                "status": {},
            }
        )
    return _pod_list(items)


async def _samples(request: web.Request) -> list[PodStats] | web.Response:
    provider = deps(request).provider
    if not isinstance(provider, StatsProvider):
        return plain(501, f"the {provider.name} backend does not provide stats")
    try:
        return list(await provider.pod_stats())
    except ProviderError as error:
        log.error("backend stats failed", extra={"error": str(error)})
        return plain(500, f"Internal Error: {error}")


def _known_uids(request: web.Request) -> set[str]:
    return {uid_of(p) for p in deps(request).pods()}


async def stats_summary(request: web.Request) -> web.Response:
    samples = await _samples(request)
    if isinstance(samples, web.Response):
        return samples
    summary = stats(request).summary(samples, _known_uids(request))
    return web.json_response(dumps=_compact, data=summary)


async def metrics_resource(request: web.Request) -> web.Response:
    provider = deps(request).provider
    if not isinstance(provider, StatsProvider):
        return plain(501, f"the {provider.name} backend does not provide stats")
    now = time.time()
    try:
        samples = list(await provider.pod_stats())
    except ProviderError as error:
        log.error("backend stats failed", extra={"error": str(error)})
        text = resource_metrics.render(None, int(now * 1000))
    else:
        summary = stats(request).summary(samples, _known_uids(request), now=now)
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


def _not_served(what: str) -> Handler:
    async def handler(_: web.Request) -> web.Response:
        return plain(501, f"{what} is not served by vkpy")

    return handler


NOT_SERVED: tuple[tuple[str, str, str], ...] = (
    # (method, path, what): the kubelet's paths vkpy has nothing behind
    ("POST", "/run/{namespace}/{pod}/{container}", "/run"),
    ("POST", "/run/{namespace}/{pod}/{uid}/{container}", "/run"),
    ("GET", "/metrics/cadvisor", "/metrics/cadvisor"),
    ("GET", "/metrics/probes", "/metrics/probes"),
    ("GET", "/metrics/slis", "/metrics/slis"),
    ("GET", "/configz", "/configz"),
    ("GET", "/statusz", "/statusz"),
    ("GET", "/flagz", "/flagz"),
    ("GET", "/logs", "node logs (/logs)"),
    ("GET", "/logs/{path:.+}", "node logs (/logs)"),
    ("GET", "/debug/pprof", "/debug/pprof"),
    ("GET", "/debug/pprof/{path:.+}", "/debug/pprof"),
    ("PUT", "/debug/flags/v", "/debug/flags/v"),
    ("POST", "/checkpoint/{namespace}/{pod}/{container}", "/checkpoint"),
)


def _both_spellings(router: web.UrlDispatcher, method: str, path: str, handler: Handler) -> None:
    """Route `path` with and without a trailing slash: the kubelet's router ignores it
    and Virtual Kubelet's redirects to the other spelling, so clients use either."""
    bare = path.rstrip("/")
    router.add_route(method, bare, handler)
    router.add_route(method, bare + "/", handler)


def add_routes(app: web.Application) -> None:
    router = app.router
    read_only: tuple[tuple[str, Handler], ...] = (
        ("/healthz", healthz),
        ("/healthz/ping", healthz),
        ("/healthz/log", healthz),
        ("/healthz/syncloop", healthz),
        ("/pods", pods),
        ("/runningpods", running_pods),
        ("/stats/summary", stats_summary),
        ("/metrics", own_metrics),
        ("/metrics/resource", metrics_resource),
        ("/containerLogs/{namespace}/{pod}/{container}", container_logs),
    )
    for path, handler in read_only:
        _both_spellings(router, "GET", path, handler)
    for kind, stream_handler in STREAM_HANDLERS.items():
        if kind == "portForward":
            shapes = ["/{namespace}/{pod}", "/{namespace}/{pod}/{uid}"]
        else:
            shapes = ["/{namespace}/{pod}/{container}", "/{namespace}/{pod}/{uid}/{container}"]
        for shape in shapes:
            for method in ("GET", "POST"):
                _both_spellings(router, method, f"/{kind}{shape}", stream_handler)
    for method, path, what in NOT_SERVED:
        _both_spellings(router, method, path, _not_served(what))


def add_metrics_routes(app: web.Application) -> None:
    """The plain-HTTP metrics port: /metrics and /healthz only."""
    app.router.add_get("/metrics", own_metrics)
    app.router.add_get("/healthz", healthz)
