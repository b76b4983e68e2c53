"""Settings of the kubelet HTTPS API, and what the API needs from the rest of vkpy.

The API is configured by flags (see vkpy.app.cli) mapped onto `ApiSettings`; the runner
hands it `ApiDependencies`: plain functions and objects, never the pod controller
itself, so vkpy.api and vkpy.node stay independent of each other (import-linter
checks it). Secure by default: authorization through SubjectAccessReview, anonymous
requests refused, TLS 1.2 or newer only.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import Literal, Protocol

from vkpy.api.certs.tls_options import TLSOptions
from vkpy.core.objects import KubeObject
from vkpy.kube.events import InvolvedObject
from vkpy.providers.base import Provider

AuthorizationMode = Literal["Webhook", "AlwaysAllow"]
AUTHORIZATION_MODES: tuple[AuthorizationMode, ...] = ("Webhook", "AlwaysAllow")


@dataclass(frozen=True)
class ConnectionLimits:
    """How long and how many connections the kubelet API keeps (vkpy.api.listener)."""

    handshake_timeout: float = 10.0
    """A TLS handshake not finished by then is dropped."""
    request_header_timeout: float = 30.0
    """From the connection's start (after TLS), or from the first byte of a later
    request, to the end of the request's head; then the connection is closed."""
    idle_timeout: float = 90.0
    """A keep-alive connection with no request for this long is closed (the kubelet's
    IdleTimeout)."""
    max_connections: int = 1024
    """Open connections at most; more are closed at once, before TLS."""
    max_connections_per_client: int = 256
    """Open connections from one client address at most (the API server reaches the
    node from one address per replica, so this leaves room for its streams)."""
    max_connections_process: int = 0
    """Open connections over all the process's ports (a node set's) at most; 0: a
    share of the open-file limit (vkpy.core.open_files.connection_budget)."""


@dataclass(frozen=True)
class ApiSettings:
    """The kubelet HTTPS API on :10250 (and the optional plain-HTTP metrics port)."""

    listen_address: str = "0.0.0.0"
    port: int = 10250
    tls_cert_file: str | None = None
    """Serving certificate (PEM, may hold the chain); reloaded when the file changes."""
    tls_private_key_file: str | None = None
    cert_dir: str = "certs"
    """Where generated certificates live: the self-signed pair (kubelet.crt/.key) and
    the certificate issued from a CSR (kubelet-server-current.pem)."""
    rotate_server_certificates: bool = False
    """Get the serving certificate from the cluster (CSR with signer
    kubernetes.io/kubelet-serving) and renew it at 70-90% of its life."""
    client_ca_file: str | None = None
    """CA bundle that signs client certificates (user = CN, groups = O). None: the
    cluster CA of the kubeconfig (or the in-cluster service account's ca.crt)."""
    anonymous_auth: bool = False
    """Serve requests that carry no credentials as system:anonymous."""
    authorization_mode: AuthorizationMode = "Webhook"
    """Webhook: ask the API server (SubjectAccessReview). AlwaysAllow: development only."""
    authn_cache_ttl: float = 120.0
    """How long a TokenReview answer is cached (the kubelet's default)."""
    authz_allow_ttl: float = 300.0
    """How long an allowed SubjectAccessReview is cached."""
    authz_deny_ttl: float = 30.0
    """How long a denied SubjectAccessReview is cached."""
    metrics_bind_address: str = "127.0.0.1"
    metrics_port: int = 0
    """Plain-HTTP port serving only /metrics and /healthz (0: off)."""
    reload_interval: float = 10.0
    """How often certificate and CA files are checked for changes."""
    tls: TLSOptions = field(default_factory=TLSOptions)
    """Oldest TLS version and TLS 1.2 suites offered (--tls-min-version,
    --tls-cipher-suites; default: TLS 1.2, the kubelet's ECDHE AEAD suites)."""
    limits: ConnectionLimits = ConnectionLimits()
    """Deadlines and caps for connections (vkpy.api.listener)."""


class ClusterClient(Protocol):
    """The API-server calls the kubelet API makes (vkpy.kube.client.KubeClient):
    TokenReviews, SubjectAccessReviews, CertificateSigningRequests."""

    async def create(self, path: str, body: KubeObject) -> KubeObject: ...

    async def get(self, path: str) -> KubeObject: ...


class EventSink(Protocol):
    """Where Events go (vkpy.kube.events.EventRecorder)."""

    def emit(
        self, involved: InvolvedObject, event_type: str, reason: str, message: str
    ) -> None: ...


FindPod = Callable[[str, str, str | None], KubeObject | None]
"""(namespace, name, uid or None) -> the node's pod, if it has one."""


@dataclass(frozen=True)
class ApiDependencies:
    """What the API uses from the rest of the node (functions, not controllers)."""

    node_name: str
    addresses: tuple[str, ...]
    """The node's addresses (IPs and host names): the serving certificate's SANs."""
    pods: Callable[[], list[KubeObject]]
    """The node's pods as last seen from the API server."""
    find_pod: FindPod
    provider: Provider
    client: ClusterClient
    events: EventSink
    default_client_ca: bytes | None = None
    """The cluster CA (PEM) used when no client CA file is configured."""
    pod_documents: Callable[[], list[bytes]] | None = None
    """The node's pods, each as JSON as the node holds it (None: encoded from `pods`):
    what /pods sends, without decoding every pod for each request."""
    running_pods: Callable[[], Awaitable[list[KubeObject]]] | None = None
    """The pods the backend runs, shaped for /runningpods/ (None: derived from `pods`)."""
    provider_for: Callable[[KubeObject], Provider] | None = None
    """The backend running a given pod, when one listener serves many nodes each with
    its own (None: `provider` runs every pod)."""
    node_ports: Mapping[int, str] = field(default_factory=dict)
    """A node set: the port each node advertises, all served by this one listener, so
    a request names its node by the port it came in on (/stats/summary names none)."""
    for_node: Callable[[str], ApiDependencies | None] | None = None
    """A node set: what the API uses for one node of it (None: not served here)."""

    def backend(self, pod: KubeObject) -> Provider:
        """The backend that runs `pod` (found with `find_pod`)."""
        return self.provider if self.provider_for is None else self.provider_for(pod)
