"""Typed application state shared by the kubelet API's handlers, and reply helpers.

Handlers live in several modules (logs, stats, routes) and find what they need on
the aiohttp application under these `web.AppKey`s, typed, rather than through
globals. The kubelet answers errors in plain text; `plain` writes them that way.
"""

from __future__ import annotations

from aiohttp import web

from vkpy.api.config import ApiDependencies
from vkpy.api.stats import StatsSampler

DEPS = web.AppKey("deps", ApiDependencies)
STATS = web.AppKey("stats", StatsSampler)
USER = web.RequestKey("user", str)
"""The authenticated user's name (for logs)."""


def plain(status: int, text: str) -> web.Response:
    """A plain-text reply, as the kubelet writes its errors."""
    return web.Response(status=status, text=text, content_type="text/plain")
