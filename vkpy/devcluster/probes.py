"""Health probes against the control-plane components over mutual TLS.

`up` must not return before the cluster can serve a test that creates a pod at once,
and must not hang when a component is broken. These small blocking HTTPS probes (one
short request each, never an exception for a component that is not up yet) are what
the start-up loop polls. They verify every server certificate: the components serve
certificates from the dev cluster's own CAs.
"""

from __future__ import annotations

import http.client
import ssl
from pathlib import Path

from .cluster_pki import ClusterPKI
from .components import LOOPBACK, Ports
from .pki import CertPaths

#: (component, what it has not done yet) while start-up waits.
Pending = tuple[str, str]


def tls_context(ca_cert: Path, client: CertPaths | None = None) -> ssl.SSLContext:
    """A client context that trusts `ca_cert` and presents `client` if given."""
    ctx = ssl.create_default_context(cafile=str(ca_cert))
    if client is not None:
        ctx.load_cert_chain(str(client.cert), str(client.key))
    return ctx


def https_get(
    port: int, path: str, ctx: ssl.SSLContext, timeout: float = 3.0
) -> tuple[int, bytes] | None:
    """GET https://127.0.0.1:<port><path>; (status, body), or None if unreachable."""
    conn = http.client.HTTPSConnection(LOOPBACK, port, context=ctx, timeout=timeout)
    try:
        conn.request("GET", path)
        response = conn.getresponse()
        return response.status, response.read()
    except (OSError, http.client.HTTPException):
        return None
    finally:
        conn.close()


def is_ok(port: int, path: str, ctx: ssl.SSLContext, timeout: float = 3.0) -> bool:
    """True when the GET answers 200."""
    result = https_get(port, path, ctx, timeout)
    return result is not None and result[0] == 200


def etcd_pending(pki: ClusterPKI, ports: Ports) -> Pending | None:
    """None once etcd answers /health; else what is missing."""
    ctx = tls_context(pki.etcd_ca.cert, pki.apiserver_etcd_client)
    result = https_get(ports.etcd_client, "/health", ctx)
    if result is not None and result[0] == 200 and b'"true"' in result[1]:
        return None
    return "etcd", "GET /health"


def apiserver_pending(pki: ClusterPKI, ports: Ports) -> Pending | None:
    """None once the API server's /readyz is ok."""
    ctx = tls_context(pki.ca.cert, pki.admin)
    return None if is_ok(ports.apiserver, "/readyz", ctx) else ("kube-apiserver", "GET /readyz")


def rest_pending(pki: ClusterPKI, ports: Ports) -> Pending | None:
    """Controller-manager and scheduler healthy, and what pods need exists."""
    ca_only = tls_context(pki.ca.cert)
    admin = tls_context(pki.ca.cert, pki.admin)
    checks = [
        ("kube-controller-manager", ports.controller_manager, ca_only, "/healthz"),
        ("kube-scheduler", ports.scheduler, ca_only, "/readyz"),
        # The ServiceAccount admission plugin rejects pods until this exists;
        # the controller-manager's serviceaccount controller creates it.
        (
            "kube-controller-manager",
            ports.apiserver,
            admin,
            "/api/v1/namespaces/default/serviceaccounts/default",
        ),
        # Every pod's projected token volume refers to this ConfigMap (published
        # by the controller-manager's root-ca-cert-publisher).
        (
            "kube-controller-manager",
            ports.apiserver,
            admin,
            "/api/v1/namespaces/default/configmaps/kube-root-ca.crt",
        ),
    ]
    for component, port, ctx, path in checks:
        if not is_ok(port, path, ctx):
            return component, f"GET {path} on port {port}"
    return None
