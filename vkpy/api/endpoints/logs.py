"""`GET /containerLogs/{namespace}/{pod}/{container}`: container logs, streamed.

What `kubectl logs` reaches through the API server. The pod and container must be
this node's (404 otherwise, as the kubelet answers); the query is decoded by
vkpy.api.endpoints.log_options (400/422); the backend's records are then streamed as they
come, with the timestamp prefix and the byte limit applied here.

Streaming has two halves so that a fast backend and a slow client both work: the
handler pulls records from the backend and appends their bytes to a buffer; a writer
task sends whatever is buffered as one chunk whenever it gets to run. Records the
backend has ready are therefore coalesced into few large writes (a big log is not one
TLS record per line), while a follow that waits for the next line has sent (flushed)
everything before it waits. The buffer is bounded, so a slow client slows the
backend down instead of filling memory.

A backend error before the first byte is the kubelet's 400: when the backend has no
such logs, in the kubelet's words from the container's reported status (`container
"x" in pod "y" is not available`, `... is waiting to start: <reason>`, `previous
terminated container "x" in pod "y" not found`), never the backend's own message;
other errors with the backend's message (501 if it has no logs, 503 if it is
unavailable). After the first byte, the stream just ends. The backend's stream is closed in
every case: end of logs, byte limit reached, client gone, error.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator
from datetime import UTC, datetime

from aiohttp import web

from vkpy.api.endpoints.log_options import (
    LogOptions,
    LogOptionsError,
    format_timestamp,
    parse_log_options,
)
from vkpy.api.state import deps as deps_of
from vkpy.api.state import plain
from vkpy.core import metrics
from vkpy.core.objects import KubeObject, name_of, spec, status, uid_of
from vkpy.providers.base import LogRecord, LogsProvider, PodRef
from vkpy.providers.errors import (
    NotFoundError,
    ProviderError,
    RetryableError,
    UnsupportedError,
)

log = logging.getLogger(__name__)

FIRST_RECORD_WAIT = 2.0
"""How long the first record may take before the 200 headers are sent anyway."""
HIGH_WATER = 256 * 1024
"""Buffered bytes at which the handler waits for the writer."""
_MORE, _FULL, _DONE = 0, 1, 2


class _ChunkWriter:
    """Sends what the handler buffers; see the module docstring."""

    def __init__(self, response: web.StreamResponse) -> None:
        self._response = response
        self._parts: list[bytes] = []
        self._size = 0
        self._wake = asyncio.Event()
        self._room = asyncio.Event()
        self._room.set()
        self._closed = False
        self.sent = 0

    def push(self, data: bytes) -> bool:
        """Buffer `data`; False when the buffer is full: then await `room()`."""
        self._parts.append(data)
        self._size += len(data)
        self._wake.set()
        return self._size < HIGH_WATER

    async def room(self) -> None:
        self._room.clear()
        await self._room.wait()

    def close(self) -> None:
        self._closed = True
        self._wake.set()

    async def run(self) -> None:
        while True:
            if not self._parts:
                if self._closed:
                    return
                self._wake.clear()
                await self._wake.wait()
                continue
            data = b"".join(self._parts)
            self._parts.clear()
            self._size = 0
            self._room.set()
            await self._response.write(data)
            self.sent += len(data)
            metrics.CONTAINER_LOG_BYTES.inc(len(data))


async def _next(records: AsyncIterator[LogRecord]) -> LogRecord | None:
    try:
        return await anext(records)
    except StopAsyncIteration:
        return None


async def _close(
    records: AsyncIterator[LogRecord], first: asyncio.Task[LogRecord | None] | None
) -> None:
    """Close the backend's stream (after the first read, if it is still running)."""
    if first is not None and not first.done():
        first.cancel()
        await asyncio.wait({first})
    aclose = getattr(records, "aclose", None)
    if aclose is not None:
        try:
            await aclose()
        except Exception:
            log.exception("closing a backend log stream failed")


def _not_found(pod: KubeObject, container: str, previous: bool) -> str:
    """Why there are no logs, in the kubelet's words (its validateContainerLogStatus),
    from the container's status as the node last reported it."""
    name = name_of(pod)
    if previous:
        return f'previous terminated container "{container}" in pod "{name}" not found'
    podstatus = status(pod)
    for field in ("containerStatuses", "initContainerStatuses", "ephemeralContainerStatuses"):
        for entry in podstatus.get(field) or ():
            if entry.get("name") != container:
                continue
            waiting = (entry.get("state") or {}).get("waiting")
            if waiting is not None:
                reason = waiting.get("reason") or ""
                return f'container "{container}" in pod "{name}" is waiting to start: {reason}'
    return f'container "{container}" in pod "{name}" is not available'


def _error_response(
    error: ProviderError, pod: KubeObject, container: str, previous: bool
) -> web.Response:
    if isinstance(error, NotFoundError):
        log.debug("backend has no such logs", extra={"container": container, "error": str(error)})
        return plain(400, _not_found(pod, container, previous))
    if isinstance(error, UnsupportedError):
        return plain(501, str(error))
    if isinstance(error, RetryableError):
        return plain(503, str(error))
    return plain(400, str(error))


def _has_container(pod: dict[str, object], name: str) -> bool:
    podspec = spec(pod)
    for field in ("containers", "initContainers", "ephemeralContainers"):
        for container in podspec.get(field) or ():
            if container.get("name") == name:
                return True
    return False


async def _chunked(request: web.Request) -> web.StreamResponse:
    response = web.StreamResponse(headers={"Content-Type": "text/plain"})
    response.enable_chunked_encoding()
    await response.prepare(request)
    return response


async def _answer(
    request: web.Request,
    records: AsyncIterator[LogRecord],
    since: datetime | None,
    options: LogOptions,
    pod: KubeObject,
    container: str,
) -> web.StreamResponse:
    """A request that does not follow: read in the handler's own task and sent in
    HIGH_WATER chunks, all of it in one chunk when it fits (`kubectl logs --tail`).
    No task or wait of its own, so the request costs the event loop one turn (under
    churn each turn waits behind the node's other work: the follow path's tasks made a
    `--tail=10` wait for four).

    Always chunked, never one response with a Content-Length, as the kubelet streams
    its logs: the API server's websocket copier (`wsstream`, what the e2e suite's
    websocket log reader goes through) drops the bytes of a read that also returns EOF,
    which is what a whole Content-Length body read at once gives it."""
    limit = options.limit_bytes
    parts: list[bytes] = []
    size = 0
    response: web.StreamResponse | None = None
    try:
        try:
            async for record in records:
                if since is not None and record.time < since:
                    continue
                data = (
                    format_timestamp(record.time) + record.data
                    if options.timestamps
                    else record.data
                )
                if limit is not None:
                    if len(data) >= limit:
                        parts.append(data[:limit])
                        size += min(len(data), limit)
                        break
                    limit -= len(data)
                parts.append(data)
                size += len(data)
                if size >= HIGH_WATER:
                    if response is None:
                        response = await _chunked(request)
                    await response.write(b"".join(parts))
                    metrics.CONTAINER_LOG_BYTES.inc(size)
                    parts, size = [], 0
        except ProviderError as error:
            if response is None and not parts:
                return _error_response(error, pod, container, options.previous)
            log.warning(
                "container log stream failed", extra={"container": container, "error": str(error)}
            )
        metrics.CONTAINER_LOG_BYTES.inc(size)
        if response is None:
            response = await _chunked(request)
        await response.write(b"".join(parts))
        await response.write_eof()
        return response
    except ConnectionError:
        if response is None:
            raise
        log.debug("log client went away", extra={"container": container})
        return response
    finally:
        await _close(records, None)


async def container_logs(request: web.Request) -> web.StreamResponse:
    deps = deps_of(request)
    namespace = request.match_info["namespace"]
    pod_name = request.match_info["pod"]
    container = request.match_info["container"]
    try:
        options = parse_log_options({k: request.query.getall(k) for k in request.query})
    except LogOptionsError as error:
        return plain(error.status, error.body)
    pod = deps.find_pod(namespace, pod_name, None)
    if pod is None:
        return plain(404, f'pod "{pod_name}" does not exist')
    if not _has_container(pod, container):
        return plain(404, f'container "{container}" not found in pod "{pod_name}"')
    provider = deps.backend(pod)
    if not isinstance(provider, LogsProvider):
        return plain(501, f"the {provider.name} backend does not provide container logs")
    ref = PodRef(namespace, pod_name, uid_of(pod))
    query = options.query(container, datetime.now(UTC))
    try:
        records = provider.container_logs(ref, query)
    except ProviderError as error:
        return _error_response(error, pod, container, options.previous)
    if not options.follow:
        return await _answer(request, records, query.since, options, pod, container)
    first = asyncio.ensure_future(_next(records))
    try:
        done, _ = await asyncio.wait({first}, timeout=FIRST_RECORD_WAIT)
        if done:
            try:
                first.result()
            except ProviderError as error:
                return _error_response(error, pod, container, options.previous)
        response = web.StreamResponse(headers={"Content-Type": "text/plain"})
        response.enable_chunked_encoding()
        await response.prepare(request)
        writer = _ChunkWriter(response)
        limit = options.limit_bytes
        since = query.since
        timestamps = options.timestamps

        def accept(record: LogRecord) -> int:
            """Buffer one record: _MORE, _FULL (wait for room), or _DONE (limit reached)."""
            nonlocal limit
            if since is not None and record.time < since:
                return _MORE
            data = format_timestamp(record.time) + record.data if timestamps else record.data
            if limit is not None:
                if len(data) >= limit:
                    writer.push(data[:limit])
                    return _DONE
                limit -= len(data)
            return _MORE if writer.push(data) else _FULL

        async def pump() -> None:
            record = await first
            state = _MORE if record is None else accept(record)
            if record is None or state == _DONE:
                return
            async for record in records:
                if state == _FULL:
                    await writer.room()
                state = accept(record)
                if state == _DONE:
                    return

        try:
            async with asyncio.TaskGroup() as group:
                group.create_task(writer.run(), name="log-writer")
                try:
                    await pump()
                except ProviderError as error:
                    log.warning(
                        "container log stream failed",
                        extra={"pod": str(ref), "uid": ref.uid, "error": str(error)},
                    )
                finally:
                    writer.close()
            await response.write_eof()
        except* ConnectionError:
            log.debug("log client went away", extra={"pod": str(ref), "uid": ref.uid})
        return response
    finally:
        await _close(records, first)
