"""Where the serving certificate and the client CA come from, and keeping them fresh.

Three sources of serving certificate, chosen by flags:

- files (`--tls-cert-file`, `--tls-private-key-file`): loaded at start (a bad pair
  stops vkpy with a clear error) and reloaded when either file changes; a change that
  does not load (a half-written pair, a key that does not match) keeps the previous
  certificate and is retried at the next check;
- the cluster (`--rotate-server-certificates`): vkpy.api.certs.csr;
- otherwise a self-signed pair in the cert directory (kubelet.crt, kubelet.key),
  made once and reused while valid for the node's addresses. The API server accepts
  it only when it does not verify kubelets (no `--kubelet-certificate-authority`),
  so vkpy warns loudly.

The client CA is `--client-ca-file` (reloaded when it changes) or else the cluster CA
from the kubeconfig, fixed for the process's life.
"""

from __future__ import annotations

import asyncio
import datetime
import logging
from collections.abc import Callable, Sequence
from pathlib import Path

from vkpy.api.certs.tls import FileSignature, ServingTLS, read_pem_files
from vkpy.api.certs.x509 import CertificateError, ServingPair, load_pair, self_signed, write_private
from vkpy.core.clock import SYSTEM_CLOCK, Clock

log = logging.getLogger(__name__)

SELF_SIGNED_CERT = "kubelet.crt"
SELF_SIGNED_KEY = "kubelet.key"


def self_signed_pair(cert_dir: Path, host: str, addresses: Sequence[str]) -> ServingPair:
    """The self-signed pair in `cert_dir`, made (again) when missing, expired within a
    day or not valid for `addresses`."""
    cert_path, key_path = cert_dir / SELF_SIGNED_CERT, cert_dir / SELF_SIGNED_KEY
    soon = datetime.datetime.now(datetime.UTC) + datetime.timedelta(days=1)
    try:
        pair = load_pair(*read_pem_files(str(cert_path), str(key_path)))
        if pair.not_after > soon and pair.covers(addresses):
            return pair
        log.info("replacing the self-signed certificate", extra={"path": str(cert_path)})
    except CertificateError:
        pass
    pair = self_signed(host, addresses)
    write_private(key_path, pair.key_pem)
    write_private(cert_path, pair.cert_pem)
    return pair


def warn_self_signed(cert_dir: Path) -> None:
    log.warning(
        "SERVING A SELF-SIGNED CERTIFICATE: API servers that verify kubelet "
        "certificates (--kubelet-certificate-authority) cannot reach this node. "
        "Use --tls-cert-file/--tls-private-key-file or --rotate-server-certificates "
        "outside development.",
        extra={"cert_dir": str(cert_dir)},
    )


class WatchedFiles:
    """Reload something from files whenever they change."""

    def __init__(self, paths: Sequence[str], load: Callable[[], None], what: str) -> None:
        self._signature = FileSignature(paths)
        self._load = load
        self._what = what

    def check(self) -> bool:
        """Reload if the files changed; True when a new version was loaded."""
        snapshot = self._signature.changed()
        if snapshot is None:
            return False
        try:
            self._load()
        except CertificateError as error:
            log.warning(
                f"{self._what} changed but cannot be loaded; keeping the previous one",
                extra={
                    "files": ",".join(str(p) for p in self._signature.paths),
                    "error": str(error),
                },
            )
            return False
        self._signature.mark(snapshot)
        log.info(f"{self._what} reloaded")
        return True

    async def watch(self, interval: float, clock: Clock = SYSTEM_CLOCK) -> None:
        while True:
            await clock.sleep(interval)
            # Off the event loop: a certificate is read in a child process
            # (vkpy.api.certs.x509); what it changes is swapped in by one assignment.
            await asyncio.to_thread(self.check)


def file_certificate(tls: ServingTLS, cert_file: str, key_file: str) -> WatchedFiles:
    """Serve the pair in these files now (CertificateError if it is unusable)."""

    def load() -> None:
        tls.serve(load_pair(*read_pem_files(cert_file, key_file)))

    load()
    return WatchedFiles([cert_file, key_file], load, "serving certificate")


def read_client_ca(path: str) -> bytes:
    try:
        data = Path(path).read_bytes()
    except OSError as error:
        raise CertificateError(f"cannot read client CA {path}: {error.strerror}") from error
    if b"-----BEGIN CERTIFICATE-----" not in data:
        raise CertificateError(f"client CA {path} holds no PEM certificate")
    return data


def client_ca_file(tls: ServingTLS, path: str) -> WatchedFiles:
    """Trust client certificates from this CA file now, and after it changes."""

    def load() -> None:
        tls.trust_clients(read_client_ca(path))

    load()
    return WatchedFiles([path], load, "client CA")
