"""The serving certificate: PEM helpers, swapping certificates under a live TLS
server without a restart, reloading files, verifying client certificates."""

from __future__ import annotations

import asyncio
import random
import re
import ssl
import warnings
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from aiohttp import web
from cryptography import x509

from tests.unit.tls_site import serving
from vkpy.api.certs.serving import client_ca_file, file_certificate, self_signed_pair
from vkpy.api.certs.tls import ServingTLS
from vkpy.api.certs.tls_options import TLSOptionsError, tls_options
from vkpy.api.certs.x509 import (
    CertificateError,
    load_combined,
    load_pair,
    rotation_deadline,
    self_signed,
    serving_csr,
)
from vkpy.core.clock import SystemClock
from vkpy.devcluster import CertificateAuthority


def test_self_signed_pair_names_the_node_and_its_addresses() -> None:
    pair = self_signed("node-1", ["127.0.0.1", "node-1", "::1", "127.0.0.1"])
    assert pair.dns_names == ("node-1",)
    assert pair.ip_addresses == ("127.0.0.1", "::1")
    assert pair.covers(["127.0.0.1", "node-1", "0:0::1"])
    assert not pair.covers(["10.0.0.1"])
    assert load_combined(pair.key_pem + pair.cert_pem).cert_pem.strip() == pair.cert_pem.strip()


def test_mismatched_or_broken_pairs_are_refused() -> None:
    one, two = self_signed("a", ["127.0.0.1"]), self_signed("b", ["127.0.0.1"])
    with pytest.raises(CertificateError, match="does not match"):
        load_pair(one.cert_pem, two.key_pem)
    with pytest.raises(CertificateError):
        load_pair(b"garbage", one.key_pem)
    with pytest.raises(CertificateError):
        load_combined(one.cert_pem)


def test_kubelet_serving_csr() -> None:
    request_pem, _ = serving_csr("node-1", ["192.0.2.7", "node-1"])
    csr = x509.load_pem_x509_csr(request_pem)
    assert csr.subject.rfc4514_string() == "CN=system:node:node-1,O=system:nodes"
    san = csr.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert [str(ip) for ip in san.get_values_for_type(x509.IPAddress)] == ["192.0.2.7"]
    assert san.get_values_for_type(x509.DNSName) == ["node-1"]
    with pytest.raises(CertificateError):
        serving_csr("node-1", [])


def test_renewal_is_between_70_and_90_percent_of_the_life() -> None:
    pair = self_signed("n", ["127.0.0.1"])
    life = pair.not_after - pair.not_before
    rng = random.Random(1)
    for _ in range(200):
        share = (rotation_deadline(pair, rng) - pair.not_before) / life
        assert 0.7 <= share <= 0.9


def test_self_signed_pair_is_reused_while_it_fits(tmp_path: Path) -> None:
    first = self_signed_pair(tmp_path, "n", ["127.0.0.1"])
    assert self_signed_pair(tmp_path, "n", ["127.0.0.1"]).cert_pem == first.cert_pem
    assert (tmp_path / "kubelet.key").stat().st_mode & 0o777 == 0o600
    other = self_signed_pair(tmp_path, "n", ["127.0.0.1", "192.0.2.9"])
    assert other.cert_pem != first.cert_pem
    assert other.covers(["192.0.2.9"])


async def handshake(
    port: int, ca: bytes | None = None, client: tuple[Path, Path] | None = None
) -> tuple[x509.Certificate, str]:
    """Connect, return the server's certificate and the body of GET /."""
    ctx = ssl.create_default_context()
    ctx.check_hostname = False
    ctx.verify_mode = ssl.CERT_NONE
    if client:
        ctx.load_cert_chain(*client)
    reader, writer = await asyncio.open_connection("127.0.0.1", port, ssl=ctx)
    try:
        der = writer.get_extra_info("ssl_object").getpeercert(binary_form=True)
        writer.write(b"GET / HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        body = (await reader.read()).split(b"\r\n\r\n", 1)[-1].decode()
    finally:
        writer.close()
    return x509.load_der_x509_certificate(der), body


async def who(request: web.Request) -> web.Response:
    ssl_object = request.transport.get_extra_info("ssl_object") if request.transport else None
    der = ssl_object.getpeercert(binary_form=True) if ssl_object else None
    if der is None:
        return web.Response(text="nobody")
    return web.Response(text=x509.load_der_x509_certificate(der).subject.rfc4514_string())


async def serve(tls: ServingTLS) -> AsyncIterator[int]:
    async with serving(tls.context, who) as port:
        yield port


async def test_new_connections_get_the_new_certificate_old_ones_keep_working() -> None:
    tls = ServingTLS(verify_client=False)
    async for port in serve(tls):
        with pytest.raises((ssl.SSLError, ConnectionError)):
            await handshake(port)
        one = self_signed("one", ["127.0.0.1"])
        tls.serve(one)
        first, _ = await handshake(port)
        assert first == x509.load_pem_x509_certificate(one.cert_pem)
        ctx = ssl.create_default_context()
        ctx.check_hostname, ctx.verify_mode = False, ssl.CERT_NONE
        reader, writer = await asyncio.open_connection("127.0.0.1", port, ssl=ctx)
        two = self_signed("two", ["127.0.0.1"])
        tls.serve(two)
        second, _ = await handshake(port)
        assert second == x509.load_pem_x509_certificate(two.cert_pem)
        writer.write(b"GET / HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        assert (await reader.read()).startswith(b"HTTP/1.1 200")
        writer.close()


async def test_tls_1_2_is_the_oldest_version_accepted() -> None:
    tls = ServingTLS(verify_client=False)
    tls.serve(self_signed("n", ["127.0.0.1"]))
    assert tls.context.minimum_version == ssl.TLSVersion.TLSv1_2
    async for port in serve(tls):
        for newest, works in ((ssl.TLSVersion.TLSv1_2, True), (ssl.TLSVersion.TLSv1_1, False)):
            ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
            ctx.check_hostname, ctx.verify_mode = False, ssl.CERT_NONE
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", DeprecationWarning)
                ctx.minimum_version = ssl.TLSVersion.MINIMUM_SUPPORTED
                ctx.maximum_version = newest
            try:
                _, writer = await asyncio.open_connection("127.0.0.1", port, ssl=ctx)
                writer.close()
                connected = True
            except (ssl.SSLError, ConnectionError):
                connected = False
            assert connected is works


def write_pair(directory: Path, name: str, pem: tuple[bytes, bytes]) -> tuple[Path, Path]:
    cert, key = directory / f"{name}.crt", directory / f"{name}.key"
    cert.write_bytes(pem[0])
    key.write_bytes(pem[1])
    return cert, key


async def test_files_are_reloaded_when_they_change(tmp_path: Path) -> None:
    one, two = self_signed("one", ["127.0.0.1"]), self_signed("two", ["127.0.0.1"])
    cert, key = write_pair(tmp_path, "serving", (one.cert_pem, one.key_pem))
    tls = ServingTLS(verify_client=False)
    watched = file_certificate(tls, str(cert), str(key))
    assert watched.check() is False
    async for port in serve(tls):
        assert (await handshake(port))[0].subject.rfc4514_string().startswith("CN=one@")
        cert.write_bytes(two.cert_pem)  # half-way through an update: key not yet written
        assert watched.check() is False
        assert (await handshake(port))[0].subject.rfc4514_string().startswith("CN=one@")
        key.write_bytes(two.key_pem)
        assert watched.check() is True
        assert (await handshake(port))[0].subject.rfc4514_string().startswith("CN=two@")
    with pytest.raises(CertificateError):
        file_certificate(ServingTLS(False), str(tmp_path / "missing.crt"), str(key))


async def test_watching_the_files_serves_the_new_pair(tmp_path: Path) -> None:
    """The watch loop (what the agent runs) loads a changed pair, off the event loop."""
    one, two = self_signed("one", ["127.0.0.1"]), self_signed("two", ["127.0.0.1"])
    cert, key = write_pair(tmp_path, "serving", (one.cert_pem, one.key_pem))
    tls = ServingTLS(verify_client=False)
    watched = file_certificate(tls, str(cert), str(key))
    sleeps = 0

    class SwapOnSecondSleep(SystemClock):
        async def sleep(self, seconds: float) -> None:
            nonlocal sleeps
            sleeps += 1
            if sleeps == 2:
                write_pair(tmp_path, "serving", (two.cert_pem, two.key_pem))
            await asyncio.sleep(0.01)

    task = asyncio.create_task(watched.watch(1.0, SwapOnSecondSleep()))
    try:
        async with asyncio.timeout(120):  # a bound on a hang: loads run in a child
            while tls.pair is None or not tls.pair.common_name.startswith("two@"):
                await asyncio.sleep(0.01)
    finally:
        task.cancel()
    async for port in serve(tls):
        assert (await handshake(port))[0].subject.rfc4514_string().startswith("CN=two@")


async def test_client_certificates_from_the_client_ca_name_the_user(tmp_path: Path) -> None:
    ca = CertificateAuthority.create("clients")
    stranger = CertificateAuthority.create("stranger")
    ca_file = tmp_path / "ca.crt"
    ca_file.write_bytes(ca.cert_pem)
    tls = ServingTLS(verify_client=True)
    watched = client_ca_file(tls, str(ca_file))
    tls.serve(self_signed("n", ["127.0.0.1"]))
    alice = write_pair(tmp_path, "alice", ca.issue("alice", organizations=["devs"], client=True))
    mallory = write_pair(tmp_path, "mallory", stranger.issue("mallory", client=True))
    async for port in serve(tls):
        assert (await handshake(port))[1] == "nobody"
        assert (await handshake(port, client=alice))[1] == "CN=alice,O=devs"
        try:  # TLS 1.3: the client may finish first, then the server drops it
            _, body = await handshake(port, client=mallory)
        except (ssl.SSLError, ConnectionError):
            body = ""
        assert body == ""
        ca_file.write_bytes(ca.cert_pem + stranger.cert_pem)
        assert watched.check() is True
        assert (await handshake(port, client=mallory))[1] == "CN=mallory"


async def _offers(port: int, cipher: str, version: ssl.TLSVersion) -> bool:
    """Whether a client offering only `cipher` (TLS 1.2) or only `version` gets in."""
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    ctx.check_hostname, ctx.verify_mode = False, ssl.CERT_NONE
    ctx.minimum_version = ctx.maximum_version = version
    if cipher:
        ctx.set_ciphers(cipher)
    try:
        _, writer = await asyncio.open_connection("127.0.0.1", port, ssl=ctx)
    except (ssl.SSLError, ConnectionError):
        return False
    writer.close()
    return True


TLS12 = ssl.TLSVersion.TLSv1_2


async def test_tls_1_2_offers_only_the_kubelets_ecdhe_aead_suites() -> None:
    tls = ServingTLS(verify_client=False)
    tls.serve(self_signed("n", ["127.0.0.1"]))  # an ECDSA key
    async for port in serve(tls):
        for cipher in ("ECDHE-ECDSA-AES128-GCM-SHA256", "ECDHE-ECDSA-CHACHA20-POLY1305"):
            assert await _offers(port, cipher, TLS12), cipher
        for cipher in (
            "ECDHE-ECDSA-AES128-SHA256",
            "ECDHE-ECDSA-AES256-SHA384",
            "ECDHE-ECDSA-AES128-SHA",
        ):
            assert not await _offers(port, cipher, TLS12), cipher
        assert await _offers(port, "", ssl.TLSVersion.TLSv1_3)


async def test_cipher_suites_and_min_version_as_the_kubelet_takes_them() -> None:
    options = tls_options("", ["TLS_ECDHE_ECDSA_WITH_AES_128_CBC_SHA256"])
    tls = ServingTLS(verify_client=False, options=options)
    tls.serve(self_signed("n", ["127.0.0.1"]))
    async for port in serve(tls):
        assert await _offers(port, "ECDHE-ECDSA-AES128-SHA256", TLS12)
        assert not await _offers(port, "ECDHE-ECDSA-AES128-GCM-SHA256", TLS12)
    tls = ServingTLS(verify_client=False, options=tls_options("VersionTLS13"))
    tls.serve(self_signed("n", ["127.0.0.1"]))
    async for port in serve(tls):
        assert not await _offers(port, "ECDHE-ECDSA-AES128-GCM-SHA256", TLS12)
        assert await _offers(port, "", ssl.TLSVersion.TLSv1_3)


@pytest.mark.parametrize(
    ("version", "suites", "message"),
    [
        ("VersionTLS10", [], "TLS 1.2 and newer only"),
        ("TLS1.2", [], "want one of VersionTLS12, VersionTLS13"),
        ("", ["TLS_NOPE"], "unknown cipher suite(s) TLS_NOPE"),
    ],
)
def test_bad_tls_flags_are_clear_errors(version: str, suites: list[str], message: str) -> None:
    with pytest.raises(TLSOptionsError, match=re.escape(message)):
        tls_options(version, suites)
