"""A small raw-JSON client for the Kubernetes API server.

`vkpy.kube.access` reads the kubeconfig or the in-cluster service account; this module
owns one aiohttp session built from it, sends requests and hands back decoded JSON,
never the generated model classes, which cost more than everything else vkpy does
with a pod (and whose import alone is 38 MiB). The session does not consult the
environment per request (aiohttp's `trust_env` read ~/.netrc and the proxy variables
on every request: 8% of a pod burst's CPU); the proxy is resolved once. Every request
is counted in the `vkpy_api_requests_total` metric so benchmarks can report API calls
per pod.

Requests go out first come, first served, at most `max_connections` at once, more
while a backlog lasts (`_gate`, `ElasticGate`); watches are apart and keep a connection
each. aiohttp's own pool
limit is not fair: a request that finds an idle connection takes it ahead of those
queued for one, and a queued request woken for a released connection loses it to the
next newcomer. In a burst of 1000 pods the first 35 status patches, queued when the
burst filled the pool, were answered only when the burst was over, 3.4 s later
(issue 30): the whole p99 of the burst.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import AsyncIterator, Callable, Mapping
from dataclasses import dataclass, replace
from typing import Any

import aiohttp

from vkpy.core import jsoncodec, metrics
from vkpy.core.objects import KubeObject
from vkpy.kube import access as kube_access
from vkpy.kube.access import Access
from vkpy.kube.elastic_gate import ElasticGate
from vkpy.kube.lean_pool import LeanPool
from vkpy.kube.tls_pool import SmallBufferConnector

log = logging.getLogger(__name__)

JSON_PATCH = "application/json-patch+json"
MERGE_PATCH = "application/merge-patch+json"
STRATEGIC_MERGE_PATCH = "application/strategic-merge-patch+json"

MAX_LINE = 64 * 1024 * 1024
"""The longest line a streaming response (a watch event) may have."""

QueryValue = str | int | bool
Query = Mapping[str, QueryValue]


class ApiError(Exception):
    """The API server answered with an error status (or could not be reached: status 0)."""

    def __init__(self, status: int, reason: str, message: str, body: KubeObject | None = None):
        super().__init__(f"{status} {reason}: {message}")
        self.status = status
        self.reason = reason
        self.message = message
        self.body = body or {}

    @property
    def not_found(self) -> bool:
        return self.status == 404

    @property
    def conflict(self) -> bool:
        return self.status == 409

    @property
    def gone(self) -> bool:
        return self.status == 410

    @property
    def retryable(self) -> bool:
        return self.status in (0, 429, 500, 502, 503, 504)


@dataclass(frozen=True)
class ClientOptions:
    """How to reach the API server."""

    kubeconfig: str | None = None
    """Path of a kubeconfig, or a list of them joined by ":" as in KUBECONFIG (merged by
    `vkpy.kube.access`, the one reader of kubeconfigs); None means in-cluster."""
    context: str | None = None
    max_connections: int = 64
    max_connections_behind: int | None = None
    """Requests in flight at once while a backlog lasts (`ElasticGate`'s ceiling);
    None: `max_connections` always."""
    request_timeout: float = 30.0


WriteBudget = Callable[[], float]
"""Seconds the caller may still write (vkpy.fleet.leader.LeaderElector.write_budget)."""

READS = frozenset({"GET", "HEAD"})


class NotLeaderError(ApiError):
    """A write refused before it was sent: this replica does not hold the leader Lease."""

    def __init__(self, method: str, path: str) -> None:
        super().__init__(503, "NotLeader", f"{method} {path}: not the leader, writes are fenced")


class KubeClient:
    """Raw JSON requests and streaming watches over one aiohttp session."""

    def __init__(
        self,
        access: Access,
        session: aiohttp.ClientSession,
        options: ClientOptions,
        write_budget: WriteBudget | None = None,
        gate: ElasticGate | None = None,
        lean: LeanPool | None = None,
    ) -> None:
        """`lean`: send requests (not streams) through these connections rather than
        aiohttp's (the heartbeat client, `separate_pool`)."""
        self._access = access
        self._session = session
        self._options = options
        self._gate = gate or ElasticGate(options.max_connections, options.max_connections_behind)
        """Requests in flight on this session, admitted in the order they came."""
        self._host = access.host.rstrip("/")
        self._write_budget = write_budget
        self._lean = lean
        self._extra: dict[str, Any] = {}
        if access.proxy:
            self._extra["proxy"] = access.proxy
        if access.server_hostname:
            self._extra["server_hostname"] = access.server_hostname

    def fenced(self, write_budget: WriteBudget) -> KubeClient:
        """The same connection, refusing every write once `write_budget()` is spent and
        ending any write request when it runs out (leader election's write fencing).
        Closing it closes nothing: the unfenced client owns the session."""
        return KubeClient(
            self._access, self._session, self._options, write_budget, self._gate, self._lean
        )

    @classmethod
    def open(cls, access: Access, options: ClientOptions) -> KubeClient:
        """A client with a session of its own for `access` (call inside the event loop)."""
        plugin = access.plugin
        if plugin is not None:  # kubernetes-asyncio's ApiClient owns the session
            session: aiohttp.ClientSession = plugin.rest_client.pool_manager  # type: ignore[attr-defined]
        else:
            connector = SmallBufferConnector(
                limit=0,  # requests are limited by the client's FIFO gate, watches are not
                ssl=access.ssl_context if access.ssl_context is not None else False,
            )
            # Watch events carry whole objects: etcd allows 1.5 MiB each.
            session = aiohttp.ClientSession(connector=connector, read_bufsize=2**21)
        return cls(access, session, options)

    def separate_pool(self, max_connections: int) -> KubeClient:
        """A client to the same API server with the same credentials and a connection
        pool of its own (call inside the event loop; close it when done). A node set's
        Lease renewals and node status go through one (the kubelet's heartbeat client),
        so a burst of pod work filling the main pool cannot make them late. Its requests
        go through a `LeanPool` (a third of aiohttp's CPU per request) unless a proxy
        is in the way. With a credential plugin (whose library owns the session) it is
        this client."""
        access = self._access
        if access.plugin is not None:
            return self
        options = replace(
            self._options, max_connections=max_connections, max_connections_behind=None
        )
        opened = KubeClient.open(access, options)
        if LeanPool.usable(access.host, access.proxy):
            opened._lean = LeanPool(access.host, access.ssl_context, access.server_hostname)
        return opened

    @classmethod
    async def connect(cls, options: ClientOptions) -> KubeClient:
        """Load configuration and open the session (no request is sent yet)."""
        if options.kubeconfig:
            access = await kube_access.from_kubeconfig(
                options.kubeconfig, options.context, options.max_connections
            )
        else:
            access = kube_access.in_cluster()
        return cls.open(access, options)

    @property
    def host(self) -> str:
        return self._host

    def cluster_ca(self) -> bytes | None:
        """The CA (PEM) this client trusts for the API server, as the kubeconfig or the
        service account gave it; None if none."""
        return self._access.ca_pem

    @property
    def session(self) -> aiohttp.ClientSession:
        return self._session

    async def close(self) -> None:
        if self._write_budget is None:
            await self._session.close()
            if self._lean is not None:
                await self._lean.close()

    async def _headers(self, content_type: str | None) -> dict[str, str]:
        headers: dict[str, str] = {"Accept": "application/json", "User-Agent": "vkpy"}
        if content_type:
            headers["Content-Type"] = content_type
        if self._access.auth is not None:
            headers.update(await self._access.auth())
        return headers

    async def request(
        self,
        method: str,
        path: str,
        *,
        query: Query | None = None,
        body: object = None,
        content_type: str = "application/json",
        timeout: float | None = None,
        decode: bool = True,
        make_body: Callable[[], object] | None = None,
        background: bool = False,
    ) -> KubeObject:
        """Send one request and return the decoded JSON body; raise ApiError on failure.
        `background`: it takes a turn only when no other request is in flight or waits
        (an Event: see ElasticGate).
        `make_body`: the body is made when the request's turn comes (it says what is
        true when it is sent: a Lease's renew time), not when it is asked for.
        `decode=False`: the caller does not use the answer (an Event written, a pod
        deleted), so its body (a whole pod, for a DELETE) is read but not decoded and
        `{}` is returned."""
        limit = timeout or self._options.request_timeout
        started = time.monotonic()
        try:
            if self._gate.locked(background):
                async with asyncio.timeout(limit):
                    await self._gate.acquire(background)
            else:  # a free turn is taken at once: no timer to arm and cancel
                await self._gate.acquire(background)
        except TimeoutError as error:
            metrics.labelled(metrics.API_REQUESTS, method, "error").inc()
            raise ApiError(
                0, "Unreachable", f"{method} {path}: no turn within {limit} s"
            ) from error
        try:
            return await self._send(
                method,
                path,
                query,
                body if make_body is None else make_body(),
                content_type,
                # what is left of the limit; never 0 or less, which aiohttp takes for none
                max(0.001, limit - (time.monotonic() - started)),
                decode,
                started,
            )
        finally:
            self._gate.release()

    async def _send(
        self,
        method: str,
        path: str,
        query: Query | None,
        body: object,
        content_type: str,
        limit: float,
        decode: bool,
        started: float,
    ) -> KubeObject:
        """One request, its turn taken (`request`)."""
        if self._write_budget is not None and method not in READS:
            budget = self._write_budget()
            if budget <= 0:
                raise NotLeaderError(method, path)
            limit = min(limit, budget)
        data = None if body is None else jsoncodec.dumps(body)
        headers = await self._headers(content_type if data is not None else None)
        outcome = "error"
        try:
            if self._lean is not None:
                async with asyncio.timeout(limit):
                    status, raw = await self._lean.request(
                        method, path, _params(query), headers, data
                    )
            else:
                async with self.session.request(
                    method,
                    self._host + path,
                    params=_params(query),
                    data=data,
                    headers=headers,
                    timeout=aiohttp.ClientTimeout(total=limit),
                    **self._extra,
                ) as response:
                    status, raw = response.status, await response.read()
            outcome = str(status)
        except (TimeoutError, aiohttp.ClientError, OSError) as error:
            raise ApiError(0, "Unreachable", f"{method} {path}: {error!r}") from error
        finally:
            metrics.labelled(metrics.API_REQUESTS, method, outcome).inc()
            metrics.labelled(metrics.API_LATENCY, method).observe(time.monotonic() - started)
        if status >= 400:
            raise _api_error(status, raw.decode("utf-8", "replace"))
        if not decode:
            return {}
        result: KubeObject = jsoncodec.loads(raw) if raw.strip() else {}
        return result

    async def get(self, path: str, query: Query | None = None) -> KubeObject:
        return await self.request("GET", path, query=query)

    async def create(
        self, path: str, body: KubeObject, decode: bool = True, background: bool = False
    ) -> KubeObject:
        return await self.request("POST", path, body=body, decode=decode, background=background)

    async def create_at_send(
        self, path: str, make_body: Callable[[], KubeObject], decode: bool = True
    ) -> KubeObject:
        """A create whose body is made when it goes out, after any wait for a turn."""
        return await self.request("POST", path, decode=decode, make_body=make_body)

    async def replace(self, path: str, body: KubeObject) -> KubeObject:
        return await self.request("PUT", path, body=body)

    async def patch(
        self,
        path: str,
        body: object,
        content_type: str = STRATEGIC_MERGE_PATCH,
        decode: bool = True,
        background: bool = False,
    ) -> KubeObject:
        return await self.request(
            "PATCH",
            path,
            body=body,
            content_type=content_type,
            decode=decode,
            background=background,
        )

    async def patch_at_send(
        self,
        path: str,
        make_body: Callable[[], object],
        content_type: str = STRATEGIC_MERGE_PATCH,
        decode: bool = True,
    ) -> KubeObject:
        """A patch whose body is made when it goes out, after any wait for a turn."""
        return await self.request(
            "PATCH", path, content_type=content_type, decode=decode, make_body=make_body
        )

    async def delete(
        self,
        path: str,
        body: KubeObject | None = None,
        query: Query | None = None,
        decode: bool = True,
    ) -> KubeObject:
        return await self.request("DELETE", path, body=body, query=query, decode=decode)

    async def stream_lines(self, path: str, query: Query, timeout: float) -> AsyncIterator[bytes]:
        """GET a streaming endpoint (a watch) and yield its lines as they arrive."""
        headers = await self._headers(None)
        metrics.labelled(metrics.API_REQUESTS, "WATCH", "started").inc()
        try:
            async with self.session.get(
                self._host + path,
                params=_params(query),
                headers=headers,
                timeout=aiohttp.ClientTimeout(total=timeout, sock_connect=10),
                **self._extra,
            ) as response:
                if response.status >= 400:
                    raise _api_error(response.status, await response.text())
                async for line in _lines(response.content, path):
                    yield line
        except (TimeoutError, aiohttp.ClientError, OSError) as error:
            raise ApiError(0, "Unreachable", f"watch {path}: {error!r}") from error


async def _lines(content: aiohttp.StreamReader, path: str) -> AsyncIterator[bytes]:
    """Complete newline-terminated lines of any size up to MAX_LINE.

    Split here rather than with `readline`, whose bound depends on aiohttp's buffer
    settings: one watch event carries a whole object, and etcd allows 1.5 MB objects
    (more once encoded as JSON). A stream that ends inside a line was cut: what was
    read of that line is not trusted (ApiError, so the watch resumes)."""
    pending = bytearray()
    async for chunk in content.iter_any():
        start = 0
        while (end := chunk.find(b"\n", start)) != -1:
            if pending:
                pending += chunk[start : end + 1]
                yield bytes(pending)
                pending.clear()
            else:
                yield chunk[start : end + 1]
            start = end + 1
        pending += chunk[start:]
        if len(pending) > MAX_LINE:
            raise ApiError(0, "LineTooLong", f"watch {path}: a line longer than {MAX_LINE} bytes")
    if pending.strip():
        raise ApiError(0, "Truncated", f"watch {path}: the stream ended inside a line")


def _params(query: Query | None) -> list[tuple[str, str]]:
    if not query:
        return []
    out: list[tuple[str, str]] = []
    for name, value in query.items():
        out.append(
            (name, ("true" if value else "false") if isinstance(value, bool) else str(value))
        )
    return out


def _api_error(status: int, text: str) -> ApiError:
    body: Any = None
    with contextlib.suppress(ValueError):
        body = jsoncodec.loads(text)
    if isinstance(body, dict):
        return ApiError(status, str(body.get("reason", "")), str(body.get("message", text)), body)
    return ApiError(status, "", text[:500])
