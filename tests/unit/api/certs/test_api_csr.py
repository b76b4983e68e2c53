"""Serving-certificate rotation against a scripted CSR API on a fake clock: request,
wait, serve, renew at 70-90% of the life, retry after a denial, reuse after restart.
(The real controller-manager signer: tests/integration/test_serving_certs.py.)"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import datetime
import random
from pathlib import Path
from typing import Any

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.x509.oid import ExtendedKeyUsageOID

from vkpy.api.certs.csr import CSR_PATH, CURRENT, SIGNER, CertificateRotator
from vkpy.api.certs.tls import ServingTLS
from vkpy.devcluster import CertificateAuthority

LIFE = datetime.timedelta(hours=10)


class Clock:
    def __init__(self) -> None:
        self.now = datetime.datetime(2026, 11, 30, tzinfo=datetime.UTC)

    def __call__(self) -> datetime.datetime:
        return self.now

    def time(self) -> float:
        return self.now.timestamp()

    async def sleep(self, seconds: float) -> None:
        self.now += datetime.timedelta(seconds=seconds)
        await asyncio.sleep(0)


class Signer:
    """A CSR API whose answers follow `decisions` ("approve"/"deny"/"ignore")."""

    def __init__(self, clock: Clock, decisions: list[str]) -> None:
        self.ca = CertificateAuthority.create("kubelet-ca")
        self.clock = clock
        self.decisions = decisions
        self.created: list[dict[str, Any]] = []
        self.created_at: list[datetime.datetime] = []

    async def create(self, path: str, body: dict[str, Any]) -> dict[str, Any]:
        assert path == CSR_PATH
        name = f"csr-{len(self.created)}"
        self.created.append({**body, "metadata": {"name": name, "uid": f"uid-{name}"}})
        self.created_at.append(self.clock())
        return self.created[-1]

    async def get(self, path: str) -> dict[str, Any]:
        index = int(path.rsplit("-", 1)[1])
        csr = self.created[index]
        decision = self.decisions[index] if index < len(self.decisions) else "ignore"
        if decision == "deny":
            return {**csr, "status": {"conditions": [{"type": "Denied", "message": "no"}]}}
        if decision == "ignore":
            return {**csr, "status": {}}
        return {
            **csr,
            "status": {
                "conditions": [{"type": "Approved", "status": "True"}],
                "certificate": base64.b64encode(self.sign(csr)).decode(),
            },
        }

    def sign(self, csr: dict[str, Any]) -> bytes:
        request = x509.load_pem_x509_csr(base64.b64decode(csr["spec"]["request"]))
        san = request.extensions.get_extension_for_class(x509.SubjectAlternativeName)
        now = self.clock()
        cert = (
            x509.CertificateBuilder()
            .subject_name(request.subject)
            .issuer_name(self.ca.cert.subject)
            .public_key(request.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now)
            .not_valid_after(now + LIFE)
            .add_extension(san.value, critical=False)
            .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), False)
            .sign(self.ca.key, hashes.SHA256())  # type: ignore[arg-type]
        )
        return cert.public_bytes(serialization.Encoding.PEM)


class Events:
    def __init__(self) -> None:
        self.reasons: list[str] = []

    def emit(self, involved: Any, event_type: str, reason: str, message: str) -> None:
        assert involved.kind == "Node"
        self.reasons.append(reason)


def rotator(
    signer: Signer, clock: Clock, tls: ServingTLS, cert_dir: Path, events: Events
) -> CertificateRotator:
    return CertificateRotator(
        signer,
        tls,
        events,
        "node-1",
        ["192.0.2.7", "node-1"],
        cert_dir,
        clock=clock,
        rng=random.Random(7),
    )


async def eventually(check: Any, timeout: float = 120.0) -> None:
    """A bound on a hang, not a timing: certificates are made in child processes."""
    async with asyncio.timeout(timeout):
        while not check():
            await asyncio.sleep(0.001)


async def test_request_serve_renew_and_retry(tmp_path: Path) -> None:
    clock = Clock()
    signer = Signer(clock, ["deny", "approve", "approve"])
    tls, events = ServingTLS(verify_client=False), Events()
    task = asyncio.create_task(rotator(signer, clock, tls, tmp_path, events).run())
    try:
        await eventually(lambda: len(signer.created) == 2 and tls.pair is not None)
        first = tls.pair
        assert first is not None
        assert first.common_name == "system:node:node-1"
        assert first.ip_addresses == ("192.0.2.7",)
        assert events.reasons[:3] == [
            "ServingCertificatePending",
            "ServingCertificateFailed",
            "ServingCertificatePending",
        ]
        assert events.reasons[3] == "ServingCertificateIssued"
        spec = signer.created[0]["spec"]
        assert spec["signerName"] == SIGNER
        assert spec["usages"] == ["digital signature", "server auth"]
        assert signer.created[0]["metadata"]["name"] == "csr-0"
        # the denial was retried after the first backoff step
        assert signer.created_at[1] - signer.created_at[0] >= datetime.timedelta(seconds=2)

        await eventually(lambda: len(signer.created) == 3 and tls.pair is not first)
        share = (signer.created_at[2] - first.not_before) / LIFE
        assert 0.7 <= share <= 0.9
        assert tls.pair is not None and tls.pair.not_before > first.not_before
        assert "ServingCertificatePending" not in events.reasons[4:]  # a cert was served
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task

    stored = (tmp_path / CURRENT).read_bytes()
    assert b"PRIVATE KEY" in stored
    assert (tmp_path / CURRENT).stat().st_mode & 0o777 == 0o600

    restarted_tls = ServingTLS(verify_client=False)
    again = rotator(signer, clock, restarted_tls, tmp_path, Events())
    task = asyncio.create_task(again.run())
    try:
        await eventually(lambda: restarted_tls.pair is not None)
        assert len(signer.created) == 3  # reused the stored certificate, no new CSR
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task


async def test_an_unanswered_request_is_replaced_after_the_wait_timeout(tmp_path: Path) -> None:
    clock = Clock()
    signer = Signer(clock, ["ignore", "approve"])
    tls = ServingTLS(verify_client=False)
    task = asyncio.create_task(rotator(signer, clock, tls, tmp_path, Events()).run())
    try:
        await eventually(lambda: tls.pair is not None)
        assert signer.created_at[1] - signer.created_at[0] >= datetime.timedelta(minutes=15)
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
