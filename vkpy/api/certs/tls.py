"""The TLS side of the kubelet API: one listening context whose certificate can change.

A kubelet's serving certificate and client CA change while it runs (files replaced,
certificates renewed from the cluster), and a restart would cut every `kubectl logs
-f`. asyncio fixes the SSLContext a server listens with, so `ServingTLS` listens with
a *dispatching* context whose SNI callback (called for every ClientHello, with or
without a server name) hands the connection over to the current live context. A
change builds a new live context and swaps one reference: new connections get it,
connections already open keep theirs, and nothing is ever half-updated.

Until a certificate exists (a CSR still waiting for approval) handshakes are refused
with a TLS handshake_failure alert, as the kubelet does.

Client certificates are requested (not required) when a client CA is configured, and
verified by OpenSSL against it; one that fails verification ends the handshake (Go's
kubelet would answer 401 instead: Python's ssl has no verify callback to defer it).
TLS 1.2 is the oldest version accepted, with the kubelet's default suites (ECDHE,
AEAD only) unless `--tls-min-version`/`--tls-cipher-suites` say otherwise
(vkpy.api.certs.tls_options).
"""

from __future__ import annotations

import contextlib
import logging
import os
import ssl
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from vkpy.api.certs.tls_options import TLSOptions
from vkpy.api.certs.x509 import CertificateError, ServingPair
from vkpy.core import metrics
from vkpy.core.rfc3339 import format_time

log = logging.getLogger(__name__)

ALPN = ["http/1.1"]


def _context(verify_client: bool, options: TLSOptions) -> ssl.SSLContext:
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.minimum_version = options.minimum
    if options.ciphers:
        ctx.set_ciphers(options.ciphers)
    ctx.verify_mode = ssl.CERT_OPTIONAL if verify_client else ssl.CERT_NONE
    ctx.set_alpn_protocols(ALPN)
    return ctx


def _load_chain(ctx: ssl.SSLContext, pair: ServingPair) -> None:
    """ssl only loads certificates from files: go through a private temporary file."""
    fd, name = tempfile.mkstemp(prefix="vkpy-tls-", suffix=".pem")
    try:
        with os.fdopen(fd, "wb") as file:
            file.write(pair.cert_pem.rstrip(b"\n") + b"\n" + pair.key_pem)
        ctx.load_cert_chain(name)
    except ssl.SSLError as error:
        raise CertificateError(f"OpenSSL refused the certificate: {error}") from error
    finally:
        with contextlib.suppress(OSError):
            os.unlink(name)


def _load_bundle(ctx: ssl.SSLContext, bundle: bytes) -> None:
    try:
        ctx.load_verify_locations(cadata=bundle.decode("ascii", "replace"))
    except (ssl.SSLError, ValueError) as error:
        raise CertificateError(f"unusable client CA bundle: {error}") from error


def _check_bundle(bundle: bytes) -> None:
    _load_bundle(ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER), bundle)


class ServingTLS:
    """The listening SSLContext (`context`) and the certificate it currently serves."""

    def __init__(self, verify_client: bool, options: TLSOptions | None = None) -> None:
        self.verify_client = verify_client
        self.options = options or TLSOptions()
        self.context = _context(verify_client, self.options)
        self.context.sni_callback = self._select
        self._live: ssl.SSLContext | None = None
        self._pair: ServingPair | None = None
        self._client_ca: bytes | None = None

    @property
    def pair(self) -> ServingPair | None:
        """The certificate being served, if any."""
        return self._pair

    @property
    def client_ca(self) -> bytes | None:
        return self._client_ca

    def serve(self, pair: ServingPair) -> None:
        """Serve `pair` to new connections (CertificateError if OpenSSL refuses it)."""
        self._swap(pair, self._client_ca)
        metrics.SERVING_CERT_EXPIRY.set(pair.not_after.timestamp())
        log.info(
            "serving certificate loaded",
            extra={
                "subject": pair.common_name,
                "not_after": format_time(pair.not_after),
                "dns": ",".join(pair.dns_names),
                "ips": ",".join(pair.ip_addresses),
            },
        )

    def trust_clients(self, client_ca: bytes | None) -> None:
        """Verify client certificates against this CA bundle (PEM) from now on."""
        if client_ca is not None and not self.verify_client:
            log.warning("client CA ignored: client certificates were not requested at start")
        if client_ca is not None:
            _check_bundle(client_ca)
        self._client_ca = client_ca
        if self._pair is not None:
            self._swap(self._pair, client_ca)

    def _swap(self, pair: ServingPair, client_ca: bytes | None) -> None:
        ctx = _context(self.verify_client, self.options)
        _load_chain(ctx, pair)
        if self.verify_client and client_ca:
            _load_bundle(ctx, client_ca)
        self._live = ctx
        self._pair = pair

    def _select(
        self, sslobj: ssl.SSLObject, server_name: str | None, _: ssl.SSLContext
    ) -> int | None:
        live = self._live
        if live is None:
            metrics.KUBELET_API_TLS_REFUSED.inc()
            return ssl.ALERT_DESCRIPTION_HANDSHAKE_FAILURE
        sslobj.context = live
        return None


@dataclass(frozen=True)
class _Stat:
    mtime_ns: int
    size: int
    inode: int


class FileSignature:
    """Tells whether some files changed (mtime, size or inode) since they were last
    loaded; a failed load is not `mark`ed, so it is retried at the next check."""

    def __init__(self, paths: Sequence[str | Path]) -> None:
        self.paths = tuple(Path(p) for p in paths)
        self._loaded = self.snapshot()

    def snapshot(self) -> tuple[_Stat | None, ...]:
        out: list[_Stat | None] = []
        for path in self.paths:
            try:
                st = path.stat()
            except OSError:
                out.append(None)
                continue
            out.append(_Stat(st.st_mtime_ns, st.st_size, st.st_ino))
        return tuple(out)

    def changed(self) -> tuple[_Stat | None, ...] | None:
        """The new snapshot if anything changed since the last `mark`, else None."""
        now = self.snapshot()
        return None if now == self._loaded else now

    def mark(self, snapshot: tuple[_Stat | None, ...]) -> None:
        self._loaded = snapshot


def read_pem_files(cert_file: str, key_file: str) -> tuple[bytes, bytes]:
    """Both files' bytes; CertificateError naming the file that cannot be read."""
    out: list[bytes] = []
    for path in (cert_file, key_file):
        try:
            out.append(Path(path).read_bytes())
        except OSError as error:
            raise CertificateError(f"cannot read {path}: {error.strerror}") from error
    return out[0], out[1]
