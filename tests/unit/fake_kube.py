"""An in-memory API server for controller unit tests, with faults on demand.

It keeps objects by path with resourceVersions, answers list and watch of pods by
node (`spec.nodeName=x` or `!=x`), list and watch of every Service, status patches
(strategic merge of conditions by type, UID precondition), deletes with
preconditions, Events, Leases, Nodes (listed and watched by label or name) and
TokenRequests, records every request, and fails the requests a test scripts with
`fail`.
"""

from __future__ import annotations

import asyncio
import copy
import json
import re
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from tests.unit.fake_clock import FakeClock
from vkpy.kube.client import ApiError

Obj = dict[str, Any]

POD_PATH = re.compile(r"^/api/v1/namespaces/([^/]+)/pods/([^/]+)(/status)?$")
LEASES = re.compile(r"^/apis/coordination\.k8s\.io/v1/namespaces/([^/]+)/leases$")
"""A Lease collection: listed and watched by label (`key=value`)."""
SERVICE_PATH = re.compile(r"^/api/v1/namespaces/([^/]+)/services/([^/]+)$")
SERVICES = "/api/v1/services"
NODES = "/api/v1/nodes"
NODE_PATH = re.compile(r"^/api/v1/nodes/([^/]+)$")


def ts(epoch: float) -> str:
    return datetime.fromtimestamp(epoch, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


@dataclass
class Request:
    method: str
    path: str
    body: Any = None


@dataclass
class Fault:
    method: str
    pattern: str
    error: Exception
    times: int


@dataclass
class _Watch:
    queue: asyncio.Queue[bytes | Exception] = field(default_factory=asyncio.Queue)
    leases: str = ""
    """Watching a Lease collection (its path), not pods."""
    labels: str = ""
    """The Lease watch's label selector (`key=value`, or "" for all)."""
    services: bool = False
    """Watching every Service, not pods."""
    nodes: dict[str, Any] | None = None
    """Watching Nodes: the watch's query (label or metadata.name field selector)."""

    def wants(self, path: str, obj: Obj) -> bool:
        if self.services:
            return bool(SERVICE_PATH.match(path))
        if self.nodes is not None:
            return bool(NODE_PATH.match(path)) and _node_selected(obj, self.nodes)
        if not self.leases:
            return bool(POD_PATH.match(path))
        return path.startswith(self.leases + "/") and _labelled(obj, self.labels)


def _node_selected(obj: Obj, query: Any) -> bool:
    """Whether a Node matches a list's or watch's selectors (label `key=value`, field
    `metadata.name=x`: what vkpy asks for)."""
    field = str((query or {}).get("fieldSelector", ""))
    if field:
        key, _, name = field.partition("=")
        assert key == "metadata.name", f"the fake selects nodes by name only: {field}"
        if (obj.get("metadata") or {}).get("name") != name:
            return False
    return _labelled(obj, str((query or {}).get("labelSelector", "")))


def _labelled(obj: Obj, selector: str) -> bool:
    if not selector:
        return True
    key, _, value = selector.partition("=")
    return ((obj.get("metadata") or {}).get("labels") or {}).get(key) == value


def _merge_status(current: Obj, patch: Obj) -> Obj:
    out = dict(current)
    for key, value in patch.items():
        if value is None:
            out.pop(key, None)
        elif key == "conditions":
            merged = {c["type"]: dict(c) for c in out.get("conditions") or []}
            for condition in value:  # merged by type; null removes a field
                item = {**merged.get(condition["type"], {}), **condition}
                merged[condition["type"]] = {k: v for k, v in item.items() if v is not None}
            out["conditions"] = list(merged.values())
        elif isinstance(value, list):
            out[key] = [v for v in value if not (isinstance(v, dict) and "$patch" in v)]
        else:
            out[key] = value
    return out


def _merge(current: Any, patch: Any) -> Any:
    if not isinstance(patch, dict) or not isinstance(current, dict):
        return copy.deepcopy(patch)
    out = dict(current)
    for key, value in patch.items():
        if value is None:
            out.pop(key, None)
        else:
            out[key] = _merge(out.get(key), value)
    return out


class FakeKube:
    """Duck-types vkpy.kube.client.KubeClient."""

    def __init__(self, clock: FakeClock) -> None:
        self.clock = clock
        self.objects: dict[str, Obj] = {}
        self.requests: list[Request] = []
        self.faults: list[Fault] = []
        self._before: list[tuple[str, str, Callable[[], object]]] = []
        self._version = 100
        self._watches: list[_Watch] = []
        self._log: list[tuple[int, str, Obj, bytes]] = []
        self._uids = 0
        self.host = "https://127.0.0.1:6443"
        self.streaming_lists = True
        """Whether a watch with sendInitialEvents is served (False: refused, 422)."""

    # --- test controls ------------------------------------------------------------

    def fail(self, method: str, pattern: str, error: Exception, times: int = 1) -> None:
        """Make the next `times` requests `method` on a path matching `pattern` raise."""
        self.faults.append(Fault(method, pattern, error, times))

    def before(self, method: str, pattern: str, action: Callable[[], object]) -> None:
        """Run `action` (someone else's write) once, just before the server handles the
        next `method` on a path matching `pattern`: its watch event is queued before
        the request's own, but the request is answered before the watch delivers it."""
        self._before.append((method, pattern, action))

    def requests_to(self, method: str, pattern: str = "") -> list[Request]:
        return [r for r in self.requests if r.method == method and re.search(pattern, r.path)]

    def add_pod(self, pod: Obj) -> Obj:
        pod = copy.deepcopy(pod)
        m = pod.setdefault("metadata", {})
        m.setdefault("namespace", "default")
        if "uid" not in m:
            self._uids += 1
            m["uid"] = f"uid-{self._uids}"
        pod.setdefault("status", {"phase": "Pending"})
        return self._put(self.pod_path(pod), pod, "ADDED")

    def pod(self, namespace: str, name: str) -> Obj | None:
        return self.objects.get(f"/api/v1/namespaces/{namespace}/pods/{name}")

    def pod_path(self, pod: Obj) -> str:
        m = pod["metadata"]
        return f"/api/v1/namespaces/{m['namespace']}/pods/{m['name']}"

    def update_pod(self, pod: Obj, **changes: Any) -> Obj:
        """Someone else changed the pod (a merge of `changes` into it)."""
        path = self.pod_path(pod)
        current = self.objects[path]
        return self._put(path, _merge(current, changes), "MODIFIED")

    def set_status(self, pod: Obj, status: Obj) -> Obj:
        """Someone else wrote the pod's status (e.g. the node lifecycle controller)."""
        path = self.pod_path(pod)
        current = copy.deepcopy(self.objects[path])
        current["status"] = _merge_status(current.get("status") or {}, status)
        return self._put(path, current, "MODIFIED")

    def mark_deleting(self, pod: Obj, grace: int = 30) -> Obj:
        path = self.pod_path(pod)
        current = copy.deepcopy(self.objects[path])
        current["metadata"]["deletionTimestamp"] = ts(self.clock.time())
        current["metadata"]["deletionGracePeriodSeconds"] = grace
        return self._put(path, current, "MODIFIED")

    def remove(self, path: str) -> None:
        obj = self.objects.pop(path)
        self._bump(obj)
        self._send(path, "DELETED", obj)

    def cut_watches(self, error: Exception | None = None) -> None:
        """End every open watch (with `error`, or as the server closing it)."""
        for watch in self._watches:
            watch.queue.put_nowait(error or EOFError())
        self._watches.clear()

    def events(self, reason: str | None = None) -> list[Obj]:
        return [
            o
            for p, o in self.objects.items()
            if "/events/" in p and (reason is None or o.get("reason") == reason)
        ]

    # --- internals ----------------------------------------------------------------

    def _bump(self, obj: Obj) -> None:
        self._version += 1
        obj.setdefault("metadata", {})["resourceVersion"] = str(self._version)

    def _put(self, path: str, obj: Obj, event: str) -> Obj:
        self._bump(obj)
        self.objects[path] = obj
        self._send(path, event, obj)
        return copy.deepcopy(obj)

    def _send(self, path: str, event: str, obj: Obj) -> None:
        watched = POD_PATH.match(path) or SERVICE_PATH.match(path) or NODE_PATH.match(path)
        if not watched and not LEASES.match(path.rsplit("/", 1)[0]):
            return
        line = json.dumps({"type": event, "object": obj}).encode() + b"\n"
        self._log.append((self._version, path, obj, line))
        for watch in self._watches:
            if watch.wants(path, obj):
                watch.queue.put_nowait(line)

    def _check(self, method: str, path: str, body: Any) -> None:
        self.requests.append(Request(method, path, copy.deepcopy(body)))
        for hook in [h for h in self._before if h[0] == method and re.search(h[1], path)]:
            self._before.remove(hook)
            hook[2]()
        for fault in self.faults:
            if fault.method == method and fault.times > 0 and re.search(fault.pattern, path):
                fault.times -= 1
                raise fault.error

    def _missing(self, path: str) -> ApiError:
        return ApiError(404, "NotFound", f"{path} not found")

    # --- the client's interface ----------------------------------------------------

    def cluster_ca(self) -> bytes | None:
        return None

    def fenced(self, write_budget: Any) -> FakeKube:
        """The write gate of a held Lease (unfenced here: the tests read the Leases)."""
        return self

    def separate_pool(self, max_connections: int) -> FakeKube:
        """The heartbeat pool (one store here: the requests are what the tests read)."""
        return self

    def _pods(self, query: Any) -> list[Obj]:
        selector = str((query or {}).get("fieldSelector", ""))
        field, negated, node = selector.partition("!=")
        if not negated:
            field, _, node = selector.partition("=")
        assert field == "spec.nodeName", f"the fake filters pods by node only: {selector}"

        def wanted(o: Obj) -> bool:
            bound = (o.get("spec") or {}).get("nodeName") or ""
            return bound != node if negated else bound == node

        return [
            copy.deepcopy(o) for p, o in self.objects.items() if POD_PATH.match(p) and wanted(o)
        ]

    def _services(self, namespace: str = "") -> list[Obj]:
        return [
            copy.deepcopy(o)
            for p, o in sorted(self.objects.items())
            if (m := SERVICE_PATH.match(p)) and (not namespace or m.group(1) == namespace)
        ]

    async def get(self, path: str, query: Any = None) -> Obj:
        self._check("GET", path, None)
        if path == SERVICES or (path.endswith("/services") and path.count("/") == 5):
            namespace = path.split("/")[4] if path != SERVICES else ""
            return {
                "kind": "ServiceList",
                "apiVersion": "v1",
                "metadata": {"resourceVersion": str(self._version)},
                "items": self._services(namespace),
            }
        if path == "/api/v1/pods":
            items = self._pods(query)
            return {
                "kind": "PodList",
                "apiVersion": "v1",
                "metadata": {"resourceVersion": str(self._version)},
                "items": items,
            }
        if path == NODES:
            nodes = [
                copy.deepcopy(o)
                for p, o in self.objects.items()
                if NODE_PATH.match(p) and _node_selected(o, query)
            ]
            limit = int(str((query or {}).get("limit") or 0))
            return {
                "kind": "NodeList",
                "apiVersion": "v1",
                "metadata": {"resourceVersion": str(self._version)},
                "items": nodes[:limit] if limit else nodes,
            }
        if LEASES.match(path):
            labels = str((query or {}).get("labelSelector", ""))
            return {
                "kind": "LeaseList",
                "apiVersion": "coordination.k8s.io/v1",
                "metadata": {"resourceVersion": str(self._version)},
                "items": [
                    copy.deepcopy(o)
                    for p, o in self.objects.items()
                    if p.startswith(path + "/") and _labelled(o, labels)
                ],
            }
        if path not in self.objects:
            raise self._missing(path)
        return copy.deepcopy(self.objects[path])

    async def create(
        self, path: str, body: Obj, decode: bool = True, background: bool = False
    ) -> Obj:
        self._check("POST", path, body)
        if path.endswith("/token"):
            seconds = int(body["spec"].get("expirationSeconds") or 3600)
            return {
                "spec": {"expirationSeconds": seconds},
                "status": {
                    "token": f"token-{len(self.requests)}",
                    "expirationTimestamp": ts(self.clock.time() + seconds),
                },
            }
        name = body["metadata"]["name"]
        target = f"{path}/{name}"
        if target in self.objects:
            raise ApiError(409, "AlreadyExists", f"{target} exists")
        obj = copy.deepcopy(body)
        obj["metadata"].setdefault("uid", f"uid-{name}")
        return self._put(target, obj, "ADDED")

    async def replace(self, path: str, body: Obj) -> Obj:
        self._check("PUT", path, body)
        current = self.objects.get(path)
        if current is None:
            raise self._missing(path)
        version = (body.get("metadata") or {}).get("resourceVersion")
        if version and version != current["metadata"]["resourceVersion"]:
            raise ApiError(409, "Conflict", "the object has been modified")
        obj = copy.deepcopy(body)
        obj["metadata"]["uid"] = current["metadata"].get("uid")
        return self._put(path, obj, "MODIFIED")

    async def create_at_send(
        self, path: str, make_body: Callable[[], Obj], decode: bool = True
    ) -> Obj:
        return await self.create(path, make_body(), decode)

    async def patch_at_send(
        self, path: str, make_body: Callable[[], Any], content_type: str = "", decode: bool = True
    ) -> Obj:
        return await self.patch(path, make_body(), content_type, decode)

    async def patch(
        self,
        path: str,
        body: Any,
        content_type: str = "",
        decode: bool = True,
        background: bool = False,
    ) -> Obj:
        self._check("PATCH", path, body)
        match = POD_PATH.match(path)
        current = self.objects.get(path.removesuffix("/status"))
        if current is None:
            raise self._missing(path)
        if match and match.group(3):
            uid = (body.get("metadata") or {}).get("uid")
            if uid and uid != current["metadata"]["uid"]:
                raise ApiError(409, "Conflict", "Precondition failed: UID in precondition")
            obj = copy.deepcopy(current)
            obj["status"] = _merge_status(obj.get("status") or {}, body.get("status") or {})
            return self._put(path.removesuffix("/status"), obj, "MODIFIED")
        if path.endswith("/status") and "/nodes/" in path:
            node_path = path.removesuffix("/status")
            obj = copy.deepcopy(self.objects[node_path])
            obj["status"] = _merge(obj.get("status") or {}, body.get("status") or {})
            return self._put(node_path, obj, "MODIFIED")
        return self._put(path, _merge(current, body), "MODIFIED")

    async def delete(
        self, path: str, body: Obj | None = None, query: Any = None, decode: bool = True
    ) -> Obj:
        self._check("DELETE", path, body)
        current = self.objects.get(path)
        if current is None:
            raise self._missing(path)
        uid = ((body or {}).get("preconditions") or {}).get("uid")
        if uid and uid != current["metadata"].get("uid"):
            raise ApiError(409, "Conflict", "Precondition failed: UID in precondition")
        self.remove(path)
        return current

    async def stream_lines(self, path: str, query: Any, timeout: float) -> AsyncIterator[bytes]:
        self._check("WATCH", path, None)
        watch = _Watch()
        if LEASES.match(path):
            watch.leases, watch.labels = path, str((query or {}).get("labelSelector", ""))
        watch.services = path == SERVICES
        if path == NODES:
            watch.nodes = dict(query or {})
        since = int(str((query or {}).get("resourceVersion") or 0))
        if (query or {}).get("sendInitialEvents"):  # a streaming list, as the server sends it
            if not self.streaming_lists:
                raise ApiError(422, "Invalid", "sendInitialEvents is forbidden for watch")
            for obj in self._services() if watch.services else self._pods(query):
                watch.queue.put_nowait(json.dumps({"type": "ADDED", "object": obj}).encode())
            end = {
                "kind": "Pod",
                "apiVersion": "v1",
                "metadata": {
                    "resourceVersion": str(self._version),
                    "annotations": {"k8s.io/initial-events-end": "true"},
                },
            }
            watch.queue.put_nowait(json.dumps({"type": "BOOKMARK", "object": end}).encode())
            since = self._version
        for version, at, obj, line in self._log:
            if version > since and watch.wants(at, obj):
                watch.queue.put_nowait(line)
        self._watches.append(watch)
        try:
            while True:
                item = await watch.queue.get()
                if isinstance(item, EOFError):
                    return
                if isinstance(item, Exception):
                    raise item
                yield item
        finally:
            if watch in self._watches:
                self._watches.remove(watch)
