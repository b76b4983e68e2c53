"""List-then-watch of one kind of object, resumed from the last resourceVersion.

The pod controller and the node must never miss a change and never act twice on a
stale view. This loop lists once, then watches from the list's resourceVersion with
bookmarks, resumes from the newest resourceVersion it has seen after a dropped
connection, relists when the server says the version is too old (410 Gone), and
reconnects with capped exponential backoff on errors. What it sees goes to a handler
as plain dicts.
"""

from __future__ import annotations

import asyncio
import json
import logging
import random
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Protocol

from vkpy import metrics
from vkpy.kube.client import ApiError, KubeClient
from vkpy.objects import KubeObject, meta

log = logging.getLogger(__name__)

Sleep = Callable[[float], Awaitable[None]]


class WatchHandler(Protocol):
    def replace(self, items: list[KubeObject]) -> None:
        """A complete list: everything not in it is gone."""

    def apply(self, event_type: str, obj: KubeObject) -> None:
        """ADDED, MODIFIED or DELETED for one object."""


@dataclass(frozen=True)
class WatchOptions:
    path: str
    """Collection path, e.g. /api/v1/pods."""
    field_selector: str = ""
    label_selector: str = ""
    resource: str = "pods"
    """Name for logs and metrics."""
    min_timeout: int = 300
    """Each watch asks the server to end after a random time in [min, 2*min] s."""
    max_backoff: float = 30.0


class _Expired(Exception):
    pass


class Watcher:
    """Keeps a handler in step with the API server. `synced` is set after the first list."""

    def __init__(
        self,
        client: KubeClient,
        options: WatchOptions,
        handler: WatchHandler,
        sleep: Sleep = asyncio.sleep,
    ) -> None:
        self._client = client
        self._options = options
        self._handler = handler
        self._sleep = sleep
        self._resource_version = ""
        self.synced = asyncio.Event()

    def _selectors(self) -> dict[str, str]:
        query: dict[str, str] = {}
        if self._options.field_selector:
            query["fieldSelector"] = self._options.field_selector
        if self._options.label_selector:
            query["labelSelector"] = self._options.label_selector
        return query

    async def run(self) -> None:
        """Run until cancelled."""
        failures = 0
        while True:
            try:
                if not self._resource_version:
                    await self._list()
                await self._watch()
                failures = 0
                metrics.WATCH_RESTARTS.labels(self._options.resource, "closed").inc()
            except _Expired:
                log.info("watch expired, relisting", extra={"resource": self._options.resource})
                metrics.WATCH_RESTARTS.labels(self._options.resource, "expired").inc()
                self._resource_version = ""
            except ApiError as error:
                failures += 1
                delay = min(self._options.max_backoff, 0.5 * 2 ** min(failures, 8))
                delay *= random.uniform(0.8, 1.2)
                log.warning(
                    "watch failed, retrying",
                    extra={"resource": self._options.resource, "error": str(error), "delay": delay},
                )
                metrics.WATCH_RESTARTS.labels(self._options.resource, "error").inc()
                if error.gone:
                    self._resource_version = ""
                await self._sleep(delay)

    async def _list(self) -> None:
        body = await self._client.get(self._options.path, self._selectors())
        items: list[KubeObject] = body.get("items") or []
        kind = str(body.get("kind", "List")).removesuffix("List")
        api_version = str(body.get("apiVersion", "v1"))
        for item in items:
            item.setdefault("kind", kind)
            item.setdefault("apiVersion", api_version)
        self._resource_version = str(meta(body).get("resourceVersion", ""))
        self._handler.replace(items)
        self.synced.set()

    async def _watch(self) -> None:
        timeout = random.randint(self._options.min_timeout, 2 * self._options.min_timeout)
        query: dict[str, str | int | bool] = {
            **self._selectors(),
            "watch": True,
            "allowWatchBookmarks": True,
            "resourceVersion": self._resource_version,
            "timeoutSeconds": timeout,
        }
        stream = self._client.stream_lines(self._options.path, query, timeout=timeout + 30)
        async for line in stream:
            if not line.strip():
                continue
            event = json.loads(line)
            event_type = event.get("type", "")
            obj: KubeObject = event.get("object") or {}
            if event_type == "ERROR":
                if obj.get("code") == 410:
                    raise _Expired
                raise ApiError(int(obj.get("code") or 0), str(obj.get("reason")), str(obj))
            version = meta(obj).get("resourceVersion")
            if version:
                self._resource_version = str(version)
            if event_type != "BOOKMARK":
                self._handler.apply(event_type, obj)
