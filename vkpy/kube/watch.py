"""List-then-watch of one kind of object, resumed from the last resourceVersion.

The pod controller and the node must never miss a change and never act twice on a
stale view. This loop lists once, then watches from the list's resourceVersion with
bookmarks, resumes from the newest resourceVersion it has seen after a dropped
connection, relists when the server says the version is too old (410 Gone), and
reconnects with capped exponential backoff on errors (which starts over once a list
or an event has come through, so one outage's back-off does not delay the next).
Nothing a stream can carry stops it: an ERROR event of any code, a line that is not
JSON or not an event, a connection cut mid-line or an object of any size end only
the current watch, which resumes from the last resourceVersion fully seen. What it
sees goes to a handler as plain dicts.

The first state comes from a streaming list where the server offers it: a watch with
`sendInitialEvents=true` and `resourceVersionMatch=NotOlderThan` sends every object
as an ADDED event, one at a time, then a bookmark marked `k8s.io/initial-events-end`,
and goes on as a watch. A LIST of 10,000 pods is one body held whole, then decoded
whole, next to the objects kept; the stream holds one event at a time. A server that
refuses it (400, 403, 422: the WatchList feature off) or ignores it (no end bookmark
while nothing more comes) gets a LIST, from then on. As with client-go, the
environment variable `KUBE_FEATURE_WatchListClient=false` turns it off (a LIST
always; bench/restart.py compares the two).
"""

from __future__ import annotations

import asyncio
import logging
import os
import random
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Protocol

from vkpy.core import jsoncodec, metrics
from vkpy.core.clock import SYSTEM_CLOCK, Clock
from vkpy.core.objects import KubeObject, annotations_of, meta
from vkpy.kube.client import ApiError, KubeClient

log = logging.getLogger(__name__)

WATCH_LIST_GATE = "KUBE_FEATURE_WatchListClient"


def watch_list_client() -> bool:
    """Whether streaming lists are asked for: on unless the environment turns the
    feature off, under client-go's name for it."""
    return os.environ.get(WATCH_LIST_GATE, "true").strip().lower() != "false"


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
    stream_initial: bool = False
    """Get the first state from a streaming list (sendInitialEvents) when offered."""
    initial_quiet: float = 15.0
    """A streaming list with no event and no end for this long: the server ignores
    sendInitialEvents (an old one); list instead."""
    changes_only: bool = False
    """Only what changes from now on: the list asks for one item, for its
    resourceVersion, and hands the handler none (a relist after 410 Gone too, so an
    empty `replace` after the first says changes may have been missed). For a
    collection whose whole state is large and not needed (a node set's Nodes)."""


EVENT_TYPES = frozenset({"ADDED", "MODIFIED", "DELETED", "BOOKMARK"})
INITIAL_EVENTS_END = "k8s.io/initial-events-end"
"""The annotation on the bookmark that ends a streaming list's initial events."""


class _Expired(Exception):
    """The resourceVersion is too old: relist."""


class _Malformed(Exception):
    """A line that is not a watch event: what follows is not trusted; resume."""


class Watcher:
    """Keeps a handler in step with the API server. `synced` is set after the first list."""

    def __init__(
        self,
        client: KubeClient,
        options: WatchOptions,
        handler: WatchHandler,
        clock: Clock = SYSTEM_CLOCK,
    ) -> None:
        self._client = client
        self._options = options
        self._handler = handler
        self._clock = clock
        self._resource_version = ""
        self._progress = False
        """Whether a list or a watch event came through since the last failure."""
        self._streaming = (
            options.stream_initial and not options.changes_only and watch_list_client()
        )
        """Whether the first state (and each relist) comes from a streaming list."""
        self.synced = asyncio.Event()

    def _selectors(self) -> dict[str, str]:
        query: dict[str, str] = {}
        if self._options.field_selector:
            query["fieldSelector"] = self._options.field_selector
        if self._options.label_selector:
            query["labelSelector"] = self._options.label_selector
        return query

    async def run(self) -> None:
        """Run until cancelled. Nothing the server sends ends it: every failure is
        logged, counted and followed by a resumed watch (or a relist)."""
        failures = 0
        while True:
            try:
                if not self._resource_version and self._streaming:
                    await self._stream_list()
                elif not self._resource_version:
                    await self._list()
                    await self._watch()
                else:
                    await self._watch()
                failures = 0
                metrics.WATCH_RESTARTS.labels(self._options.resource, "closed").inc()
                continue
            except _Expired:
                log.info("watch expired, relisting", extra={"resource": self._options.resource})
                metrics.WATCH_RESTARTS.labels(self._options.resource, "expired").inc()
                self._resource_version = ""
                continue
            except (ApiError, _Malformed) as error:
                cause = "error" if isinstance(error, ApiError) else "malformed"
                if isinstance(error, ApiError) and error.gone:
                    self._resource_version = ""
                message = str(error)
            except Exception as error:  # a bug here or in the handler: start over from a list
                cause, message = "bug", repr(error)
                log.exception("watch handler failed, relisting")
                self._resource_version = ""
            if self._progress:  # it worked in between: a new trouble starts a new back-off
                failures, self._progress = 0, False
            failures += 1
            metrics.WATCH_RESTARTS.labels(self._options.resource, cause).inc()
            delay = 0.5 * 2 ** min(failures, 8) * random.uniform(0.8, 1.2)
            delay = min(self._options.max_backoff, delay)
            log.warning(
                "watch failed, retrying",
                extra={"resource": self._options.resource, "error": message, "delay": delay},
            )
            await self._clock.sleep(delay)

    async def _list(self) -> None:
        query: dict[str, str] = self._selectors()
        if self._options.changes_only:
            query["limit"] = "1"
        body = await self._client.get(self._options.path, query)
        items: list[KubeObject] = [] if self._options.changes_only else body.get("items") or []
        kind = str(body.get("kind", "List")).removesuffix("List")
        api_version = str(body.get("apiVersion", "v1"))
        for item in items:
            _slim(item)
            item.setdefault("kind", kind)
            item.setdefault("apiVersion", api_version)
        self._synced(items, meta(body))

    def _synced(self, items: list[KubeObject], metadata: KubeObject) -> None:
        """The whole state is in (a list, or a streaming list's initial events)."""
        self._resource_version = str(metadata.get("resourceVersion", ""))
        self._handler.replace(items)
        self._progress = True
        self.synced.set()

    def _stream(self, **query: str | bool) -> AsyncIterator[bytes]:
        """A watch stream that the server ends after a random time (see WatchOptions)."""
        timeout = random.randint(self._options.min_timeout, 2 * self._options.min_timeout)
        return self._client.stream_lines(
            self._options.path,
            {
                **self._selectors(),
                "watch": True,
                "allowWatchBookmarks": True,
                **query,
                "timeoutSeconds": timeout,
            },
            timeout=timeout + 30,
        )

    async def _stream_list(self) -> None:
        """The first state as a streaming list, then the watch on the same stream."""
        stream = self._stream(sendInitialEvents=True, resourceVersionMatch="NotOlderThan")
        try:
            try:
                if not await self._initial_events(stream):
                    return  # ended before the initial state was whole: start over
            except TimeoutError:
                self._refuse("no end of the initial events")
                return
            except ApiError as error:
                if error.status in (400, 403, 422):
                    self._refuse(str(error))
                    return
                raise
            await self._follow(stream)
        finally:
            await _close(stream)

    async def _initial_events(self, stream: AsyncIterator[bytes]) -> bool:
        """Read a streaming list's initial events up to their end bookmark and hand
        them over; False if the stream ended first. TimeoutError: no event for
        `initial_quiet` seconds."""
        initial: dict[str, KubeObject] = {}
        async with asyncio.timeout(None) as quiet:
            loop = asyncio.get_running_loop()
            quiet.reschedule(loop.time() + self._options.initial_quiet)
            async for line in stream:
                quiet.reschedule(loop.time() + self._options.initial_quiet)
                if not line.strip():
                    continue
                event_type, obj = _decode(line)
                if event_type == "ERROR":
                    raise _error(obj)
                if event_type == "BOOKMARK":
                    annotations = annotations_of(obj)
                    if annotations.get(INITIAL_EVENTS_END) == "true":
                        self._synced(list(initial.values()), meta(obj))
                        return True
                    continue
                uid = str(meta(obj).get("uid") or meta(obj).get("name"))
                if event_type == "DELETED":
                    initial.pop(uid, None)
                elif event_type in EVENT_TYPES:
                    _kinded(obj, self._options)
                    initial[uid] = obj
        return False

    def _refuse(self, why: str) -> None:
        log.info(
            "the server gives no streaming list; listing instead",
            extra={"resource": self._options.resource, "why": why[:200]},
        )
        self._streaming = False

    async def _watch(self) -> None:
        stream = self._stream(resourceVersion=self._resource_version)
        await self._follow(stream)

    async def _follow(self, stream: AsyncIterator[bytes]) -> None:
        async for line in stream:
            if not line.strip():
                continue
            event_type, obj = _decode(line)
            if event_type == "ERROR":
                raise _error(obj)
            self._progress = True
            if event_type not in EVENT_TYPES:
                log.debug("unknown watch event skipped", extra={"type": event_type[:40]})
                continue
            version = meta(obj).get("resourceVersion")
            if version:
                self._resource_version = str(version)
            if event_type != "BOOKMARK":
                self._handler.apply(event_type, obj)


def _decode(line: bytes) -> tuple[str, KubeObject]:
    """One watch event's type and object; _Malformed when the line is not one."""
    try:
        event = jsoncodec.loads(line)
    except ValueError as error:
        raise _Malformed(f"not JSON ({error}): {line[:200]!r}") from error
    if not isinstance(event, dict) or not isinstance(event.get("type"), str):
        raise _Malformed(f"not a watch event: {line[:200]!r}")
    event_type: str = event["type"]
    obj = event.get("object")
    if event_type == "ERROR":
        return event_type, obj if isinstance(obj, dict) else {"message": str(obj)[:200]}
    if not isinstance(obj, dict) or not isinstance(obj.get("metadata", {}), dict):
        raise _Malformed(f"{event_type} event without an object: {line[:200]!r}")
    _slim(obj)
    return event_type, obj


async def _close(stream: AsyncIterator[bytes]) -> None:
    close = getattr(stream, "aclose", None)
    if close is not None:
        await close()


def _kinded(obj: KubeObject, options: WatchOptions) -> None:
    """Watch events carry kind and apiVersion already; a LIST's items do not."""
    obj.setdefault("kind", "Pod" if options.resource == "pods" else options.resource)
    obj.setdefault("apiVersion", "v1")


def _slim(obj: KubeObject) -> None:
    """Drop what vkpy never reads and a watched pod carries the most of: the server-side
    apply bookkeeping (`managedFields`, often a third of a pod's JSON). Done once, on the
    freshly decoded object that nobody else holds yet."""
    metadata = obj.get("metadata")
    if metadata:
        metadata.pop("managedFields", None)


def _error(status: KubeObject) -> Exception:
    """What an ERROR event (a metav1.Status, ideally) means for the watch."""
    code = status.get("code")
    code = code if isinstance(code, int) and not isinstance(code, bool) else 0
    if code == 410 or status.get("reason") in ("Expired", "Gone"):
        return _Expired()
    message = str(status.get("message") or status)[:500]
    return ApiError(code, str(status.get("reason") or "WatchError"), message)
