"""The serving certificate from the cluster: CSR, approval, issuance, renewal.

With `--rotate-server-certificates` vkpy does what the kubelet's certificate manager
(client-go util/certificate) does for `serverTLSBootstrap`:

1. At start, reuse the certificate stored in the cert directory
   (kubelet-server-current.pem, certificate and key) if it is still valid for this
   node's name and addresses.
2. Otherwise, and again at a random point between 70% and 90% of its life, create a
   CertificateSigningRequest: signer kubernetes.io/kubelet-serving, subject
   O=system:nodes CN=system:node:<node>, SANs = the node's addresses, usages digital
   signature + server auth, a fresh ECDSA P-256 key that never leaves the node.
3. Wait for approval and issuance (nothing approves these automatically: an admin
   runs `kubectl certificate approve`, or an approver controller does), store the
   pair, and serve it to new connections without a restart (vkpy.api.certs.tls).

A denied or failed request, or one not issued within 15 minutes, is replaced by a
new one after a backoff (2 s doubling to 32 s, then every 32 s). Until a first
certificate exists, handshakes are refused and the wait is logged and recorded as a
Warning Event on the Node, naming the CSR to approve.
"""

from __future__ import annotations

import asyncio
import base64
import datetime
import logging
import random
from collections.abc import Sequence
from pathlib import Path

from vkpy.api.certs.tls import ServingTLS
from vkpy.api.certs.x509 import (
    NODE_USER_PREFIX,
    CertificateError,
    ServingPair,
    load_combined,
    load_pair,
    rotation_deadline,
    serving_csr,
    write_private,
)
from vkpy.api.settings import ClusterClient, EventSink
from vkpy.core import metrics
from vkpy.core.clock import SYSTEM_CLOCK, Clock, utcnow
from vkpy.core.objects import KubeObject, conditions_of, meta, name_of, status
from vkpy.core.rfc3339 import format_time
from vkpy.kube.client import ApiError
from vkpy.kube.events import NORMAL, WARNING, InvolvedObject

log = logging.getLogger(__name__)

CSR_PATH = "/apis/certificates.k8s.io/v1/certificatesigningrequests"
SIGNER = "kubernetes.io/kubelet-serving"
USAGES = ["digital signature", "server auth"]
CURRENT = "kubelet-server-current.pem"
BACKOFF = (2.0, 4.0, 8.0, 16.0, 32.0)


class RequestFailed(Exception):
    """This CSR will not give a certificate (denied, failed, timed out, bad answer)."""

    def __init__(self, outcome: str, message: str) -> None:
        super().__init__(message)
        self.outcome = outcome


def _condition(csr: KubeObject, kind: str) -> KubeObject | None:
    for condition in conditions_of(csr):
        if condition.get("type") == kind and condition.get("status", "True") == "True":
            return dict(condition)
    return None


class CertificateRotator:
    """Keeps `tls` serving a cluster-issued certificate; `run` until cancelled."""

    def __init__(
        self,
        client: ClusterClient,
        tls: ServingTLS,
        events: EventSink,
        node_name: str,
        addresses: Sequence[str],
        cert_dir: Path,
        *,
        clock: Clock = SYSTEM_CLOCK,
        rng: random.Random | None = None,
        poll_interval: float = 1.0,
        wait_timeout: float = 900.0,
        expiration_seconds: int | None = None,
    ) -> None:
        self._client = client
        self._tls = tls
        self._events = events
        self._node = node_name
        self._addresses = tuple(addresses)
        self._path = cert_dir / CURRENT
        self._clock = clock
        self._rng = rng or random.Random()
        self._poll = poll_interval
        self._wait_timeout = wait_timeout
        self._expiration = expiration_seconds
        self.pending: str | None = None
        """Name of the CSR being waited for, if any."""
        self.issued = asyncio.Event()
        """Set once a certificate is served."""

    @property
    def _involved(self) -> InvolvedObject:
        return InvolvedObject(kind="Node", name=self._node, uid=self._node)

    def _usable(self, pair: ServingPair) -> bool:
        return (
            pair.not_after > self._now()
            and pair.common_name == NODE_USER_PREFIX + self._node
            and pair.covers(self._addresses)
        )

    def load_stored(self) -> ServingPair | None:
        """The stored certificate, if it is still good for this node."""
        try:
            pair = load_combined(self._path.read_bytes())
        except FileNotFoundError:
            return None
        except (OSError, CertificateError) as error:
            log.warning("ignoring the stored serving certificate", extra={"error": str(error)})
            return None
        if not self._usable(pair):
            log.info("the stored serving certificate is expired or for other names")
            return None
        return pair

    def _now(self) -> datetime.datetime:
        return utcnow(self._clock)

    async def run(self) -> None:
        pair = self.load_stored()
        if pair is not None:
            self._serve(pair)
        else:
            log.warning(
                "no serving certificate yet: requesting one from the cluster; "
                "TLS connections are refused until it is issued",
                extra={"node": self._node},
            )
        while True:
            if pair is not None:
                deadline = rotation_deadline(pair, self._rng)
                log.info(
                    "serving certificate renewal scheduled",
                    extra={"at": format_time(deadline), "expires": format_time(pair.not_after)},
                )
                await self._sleep_until(deadline)
            pair = await self._obtain()
            self._serve(pair)

    async def _sleep_until(self, deadline: datetime.datetime) -> None:
        while (remaining := (deadline - self._now()).total_seconds()) > 0:
            await self._clock.sleep(min(remaining, 3600.0))

    def _serve(self, pair: ServingPair) -> None:
        self._tls.serve(pair)
        self.issued.set()

    async def _obtain(self) -> ServingPair:
        """A new certificate; retries (with backoff) until one is issued."""
        attempt = 0
        while True:
            try:
                return await self._request()
            except (ApiError, RequestFailed, CertificateError) as error:
                outcome = error.outcome if isinstance(error, RequestFailed) else "error"
                metrics.SERVING_CERT_REQUESTS.labels(outcome).inc()
                delay = BACKOFF[min(attempt, len(BACKOFF) - 1)]
                log.warning(
                    "serving certificate request failed; trying again",
                    extra={"error": str(error), "retry_in": delay},
                )
                self._events.emit(self._involved, WARNING, "ServingCertificateFailed", str(error))
                attempt += 1
                await self._clock.sleep(delay)
            finally:
                self.pending = None

    async def _request(self) -> ServingPair:
        # X.509 work runs in a child process (vkpy.api.certs.x509): off the event loop.
        request_pem, key_pem = await asyncio.to_thread(serving_csr, self._node, self._addresses)
        spec: KubeObject = {
            "request": base64.b64encode(request_pem).decode(),
            "signerName": SIGNER,
            "usages": USAGES,
        }
        if self._expiration:
            spec["expirationSeconds"] = self._expiration
        body: KubeObject = {
            "apiVersion": "certificates.k8s.io/v1",
            "kind": "CertificateSigningRequest",
            "metadata": {"generateName": "csr-"},
            "spec": spec,
        }
        created = await self._client.create(CSR_PATH, body)
        name = name_of(created)
        uid = meta(created).get("uid")
        self.pending = name
        message = (
            f"waiting for CertificateSigningRequest {name} to be approved and issued "
            f"(kubectl certificate approve {name})"
        )
        log.info(message, extra={"csr": name})
        if self._tls.pair is None:
            self._events.emit(self._involved, WARNING, "ServingCertificatePending", message)
        deadline = self._now() + datetime.timedelta(seconds=self._wait_timeout)
        while True:
            csr = await self._client.get(f"{CSR_PATH}/{name}")
            if uid and meta(csr).get("uid") != uid:
                raise RequestFailed("error", f"CertificateSigningRequest {name} was replaced")
            for kind, outcome in (("Denied", "denied"), ("Failed", "failed")):
                condition = _condition(csr, kind)
                if condition is not None:
                    why = condition.get("message") or condition.get("reason") or kind
                    raise RequestFailed(outcome, f"CertificateSigningRequest {name}: {kind}: {why}")
            issued = status(csr).get("certificate")
            if issued and _condition(csr, "Approved") is not None:
                pair = await asyncio.to_thread(load_pair, base64.b64decode(issued), key_pem)
                write_private(self._path, pair.cert_pem.rstrip(b"\n") + b"\n" + key_pem)
                metrics.SERVING_CERT_REQUESTS.labels("issued").inc()
                log.info(
                    "serving certificate issued",
                    extra={"csr": name, "expires": format_time(pair.not_after)},
                )
                self._events.emit(
                    self._involved,
                    NORMAL,
                    "ServingCertificateIssued",
                    f"CertificateSigningRequest {name} issued; "
                    f"expires {format_time(pair.not_after)}",
                )
                return pair
            if self._now() > deadline:
                raise RequestFailed(
                    "timeout", f"CertificateSigningRequest {name} was not issued in time"
                )
            await self._clock.sleep(self._poll)
