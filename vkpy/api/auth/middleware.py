"""The checks every kubelet API request passes before a handler runs.

Authentication and authorization are one aiohttp middleware, so they cover every
route, the ones that exist today and the exec/attach/portForward streams that plug in
later, and also paths that match nothing (an unauthenticated caller learns nothing,
not even which paths exist). Bodies are the kubelet's: `Unauthorized` (401),
`Forbidden (user=..., verb=..., resource=nodes, subresource(s)=[...])` (403), and
`Authorization error (...)` (500) when the API server could not be asked. A second
middleware counts requests by route and status for vkpy's own /metrics.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

from aiohttp import web
from aiohttp.typedefs import Handler, Middleware

from vkpy.api.auth.authn import AuthenticationError, Authenticator, PeerCertificate
from vkpy.api.auth.authz import (
    AuthorizationError,
    Authorizer,
    error_message,
    forbidden_message,
    request_attributes,
)
from vkpy.api.endpoints.stats import StatsSampler
from vkpy.api.settings import ApiDependencies
from vkpy.api.state import NODE_DEPS, NODE_STATS, USER, USER_INFO, deps, plain
from vkpy.core import metrics

log = logging.getLogger(__name__)


def peer_certificate(request: web.Request) -> PeerCertificate | None:
    """The client certificate that TLS verified (decoded by ssl), if the client sent one."""
    transport = request.transport
    ssl_object = transport.get_extra_info("ssl_object") if transport is not None else None
    if ssl_object is None:
        return None
    cert: PeerCertificate | None = ssl_object.getpeercert()
    return cert


def _websocket_protocols(request: web.Request) -> list[str]:
    if request.headers.get("Upgrade", "").lower() != "websocket":
        return []
    out: list[str] = []
    for header in request.headers.getall("Sec-WebSocket-Protocol", ()):
        out.extend(p.strip() for p in header.split(","))
    return out


def auth_middleware(authn: Authenticator, authz: Authorizer) -> Middleware:
    """Authenticate, then authorize against the request's node (a node set: the node
    whose port it came in on, see `node_routing`)."""

    @web.middleware
    async def authenticate_and_authorize(
        request: web.Request, handler: Handler
    ) -> web.StreamResponse:
        try:
            user = await authn.authenticate(
                peer_certificate(request), request.headers, _websocket_protocols(request)
            )
        except AuthenticationError as error:
            log.debug("unauthenticated request", extra={"path": request.path, "why": str(error)})
            return plain(401, "Unauthorized")
        request[USER_INFO] = user
        node_name = deps(request).node_name
        attributes = request_attributes(user, request.method, request.path, node_name)
        allowed = False
        for attribute in attributes:
            try:
                if await authz.allowed(attribute):
                    allowed = True
                    break
            except AuthorizationError as error:
                return plain(500, error_message(error.attributes))
        if not allowed:
            return plain(403, forbidden_message(attributes))
        request[USER] = user.name
        return await handler(request)

    return authenticate_and_authorize


def node_routing(api: ApiDependencies, sampler: Callable[[str], StatsSampler]) -> Middleware:
    """A node set: every node advertises a port of its own on this one listener, and
    the port a request came in on names its node (the kubelet's paths name no node:
    /stats/summary, /pods, and authorization is against the node's name)."""

    @web.middleware
    async def by_port(request: web.Request, handler: Handler) -> web.StreamResponse:
        if api.node_ports and api.for_node is not None:
            local = request.transport.get_extra_info("sockname") if request.transport else None
            port = local[1] if isinstance(local, tuple) and len(local) >= 2 else None
            node = api.node_ports.get(port) if isinstance(port, int) else None
            if node is not None:
                node_deps = api.for_node(node)
                if node_deps is None:
                    return plain(503, f"node {node} is not served by this replica now")
                request[NODE_DEPS] = node_deps
                request[NODE_STATS] = sampler(node)
        return await handler(request)

    return by_port


def _route(request: web.Request) -> str:
    resource = request.match_info.route.resource
    return resource.canonical if resource is not None else "other"


@web.middleware
async def count_requests(request: web.Request, handler: Handler) -> web.StreamResponse:
    started = time.monotonic()
    code = "aborted"
    try:
        response = await handler(request)
        code = str(response.status)
        return response
    except web.HTTPException as error:
        code = str(error.status)
        raise
    except Exception:
        code = "500"
        raise
    finally:
        route = _route(request)
        metrics.KUBELET_API_REQUESTS.labels(route, code).inc()
        metrics.KUBELET_API_DURATION.labels(route).observe(time.monotonic() - started)
