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

from .components import LOOPBACK
from .pki import CertPaths


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
