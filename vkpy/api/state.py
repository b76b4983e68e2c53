"""Typed application state shared by the kubelet API's handlers, and reply helpers.

Handlers live in several modules (logs, stats, routes) and find what they need on
the aiohttp application under these `web.AppKey`s, typed, rather than through
globals. The kubelet answers errors in plain text; `plain` writes them that way.
"""

from __future__ import annotations

from aiohttp import web

from vkpy.api.auth.authn import UserInfo
from vkpy.api.endpoints.stats import StatsSampler
from vkpy.api.settings import ApiDependencies

DEPS = web.AppKey("deps", ApiDependencies)
STATS = web.AppKey("stats", StatsSampler)
NODE_DEPS = web.RequestKey("node_deps", ApiDependencies)
"""A node set: the dependencies of the node whose port the request came in on."""
NODE_STATS = web.RequestKey("node_stats", StatsSampler)
"""A node set: that node's stats sampler."""


def deps(request: web.Request) -> ApiDependencies:
    """What serves this request: its node's dependencies (one node: the app's)."""
    return request.get(NODE_DEPS) or request.app[DEPS]


def stats(request: web.Request) -> StatsSampler:
    """The stats sampler of the request's node."""
    return request.get(NODE_STATS) or request.app[STATS]


USER = web.RequestKey("user", str)
"""The authenticated user's name (for logs)."""
USER_INFO = web.RequestKey("user_info", UserInfo)
"""Who the request is from, once authenticated (before authorization)."""
AUDIT_OUTCOME = web.RequestKey("audit_outcome", str)
"""How a stream session ended, for its audit record (vkpy.api.streaming.audit)."""
AUDIT_DETAIL = web.RequestKey("audit_detail", dict)
"""More facts for the audit record (e.g. the exit code, the ports forwarded)."""


def plain(status: int, text: str) -> web.Response:
    """A plain-text reply, as the kubelet writes its errors."""
    return web.Response(status=status, text=text, content_type="text/plain")
