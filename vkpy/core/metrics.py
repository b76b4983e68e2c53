"""vkpy's own Prometheus metrics, defined once so every layer records into the same
series and `/metrics` can serve them (prometheus-client's default registry)."""

from __future__ import annotations

import functools
from typing import TypeVar

from prometheus_client import Counter, Gauge, Histogram
from prometheus_client.metrics import MetricWrapperBase

M = TypeVar("M", bound=MetricWrapperBase)


@functools.cache
def _child(metric: MetricWrapperBase, values: tuple[str, ...]) -> MetricWrapperBase:
    return metric.labels(*values)


def labelled(metric: M, *values: str) -> M:
    """`metric.labels(*values)`, looked up once per label set: prometheus-client's
    `labels` validates and locks on every call, which showed in a pod burst's profile
    (several labelled updates per pod). Label sets are few (methods, outcomes)."""
    child: M = _child(metric, values)  # type: ignore[assignment]
    return child


API_REQUESTS = Counter(
    "vkpy_api_requests_total",
    "Requests sent to the Kubernetes API server, by method and HTTP status (or error).",
    ["method", "code"],
)
API_LATENCY = Histogram(
    "vkpy_api_request_duration_seconds",
    "Latency of requests to the Kubernetes API server.",
    ["method"],
)
POD_OPERATIONS = Counter(
    "vkpy_pod_operations_total",
    "Operations on pods in the backend, by kind (create, update, delete, status) and outcome.",
    ["operation", "outcome"],
)
POD_OPERATION_DURATION = Histogram(
    "vkpy_pod_operation_duration_seconds",
    "Duration of backend operations on pods.",
    ["operation"],
)
POD_QUEUE_DEPTH = Gauge(
    "vkpy_pod_queue_depth",
    "Pods waiting for a worker.",
)
PODS = Gauge(
    "vkpy_pods",
    "Pods bound to this process's nodes that vkpy tracks (counted up and down as the "
    "watch reports them, never by walking them all).",
)
WATCH_RESTARTS = Counter(
    "vkpy_watch_restarts_total",
    "Times a watch was restarted, by resource and cause (expired, error, malformed, bug, closed).",
    ["resource", "cause"],
)
EVENTS = Counter(
    "vkpy_events_total",
    "Kubernetes Events by outcome (sent, aggregated, dropped by the rate limit, failed).",
    ["outcome"],
)
STATUS_UPDATES = Counter(
    "vkpy_pod_status_updates_total",
    "Pod status patches, by outcome (written, unchanged, failed).",
    ["outcome"],
)

# --- the kubelet HTTPS API -----------------------------------------------------------

KUBELET_API_REQUESTS = Counter(
    "vkpy_kubelet_api_requests_total",
    "Requests to the kubelet API, by route (e.g. containerLogs, stats) and HTTP status.",
    ["route", "code"],
)
KUBELET_API_DURATION = Histogram(
    "vkpy_kubelet_api_request_duration_seconds",
    "Time to answer a kubelet API request (whole stream for logs), by route.",
    ["route"],
)
GC_PAUSE = Histogram(
    "vkpy_gc_pause_seconds",
    "Time the cyclic garbage collector stopped the process, by generation.",
    ["generation"],
    buckets=(0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0),
)
GC_FROZEN = Gauge(
    "vkpy_gc_frozen_objects",
    "Objects in the collector's permanent generation (alive at a freeze, and any cyclic "
    "garbage among them since the last full collection): the full collection runs when "
    "this has grown fourfold since the last one.",
)
GC_FULL = Counter(
    "vkpy_gc_full_collections_total",
    "Full garbage collections (everything unfrozen, the long pause).",
)
EVENT_LOOP_LAG = Histogram(
    "vkpy_event_loop_lag_seconds",
    "How late the event loop woke a task from a short sleep: what every request and "
    "controller step waits for before it runs, on top of its own time.",
    buckets=(0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5),
)
KUBELET_API_AUTH = Counter(
    "vkpy_kubelet_api_auth_total",
    "Authentication and authorization decisions, by step (authn, authz), "
    "result and source (cert, token, anonymous, cache, review, policy).",
    ["step", "result", "source"],
)
KUBELET_API_TLS_REFUSED = Counter(
    "vkpy_kubelet_api_tls_refused_total",
    "TLS handshakes refused because no serving certificate exists yet.",
)
CONTAINER_LOG_BYTES = Counter(
    "vkpy_container_log_bytes_total",
    "Bytes of container logs sent to clients.",
)
SERVING_CERT_EXPIRY = Gauge(
    "vkpy_serving_certificate_expiration_timestamp_seconds",
    "When the serving certificate in use expires (Unix time).",
)
SERVING_CERT_REQUESTS = Counter(
    "vkpy_serving_certificate_requests_total",
    "CertificateSigningRequests for the serving certificate, by outcome "
    "(issued, denied, failed, timeout, error).",
    ["outcome"],
)
