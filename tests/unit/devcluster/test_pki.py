"""The dev cluster's PKI: certificates verify against their CA, say what they should.

Verification uses cryptography's X.509 path validation (the same rules as a TLS
client) and a real TLS handshake, not just field comparisons.
"""

from __future__ import annotations

import asyncio
import ipaddress
import ssl
import stat
from pathlib import Path

import pytest
from cryptography import x509
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from cryptography.hazmat.primitives.serialization import (
    Encoding,
    PublicFormat,
    load_pem_private_key,
)
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID
from cryptography.x509.verification import (
    Criticality,
    ExtensionPolicy,
    PolicyBuilder,
    Store,
    VerificationError,
)

from vkpy.devcluster.cluster_pki import (
    APISERVER_DNS_NAMES,
    KUBERNETES_SERVICE_IP,
    POD_NETWORK_API_IP,
    ClusterPKI,
    write_cluster_pki,
)
from vkpy.devcluster.pki import CertificateAuthority, issue_cert


@pytest.fixture(scope="module")
def ca() -> CertificateAuthority:
    return CertificateAuthority.create("test-ca")


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> ClusterPKI:
    return write_cluster_pki(tmp_path_factory.mktemp("pki") / "pki")


def load_cert(path: Path) -> x509.Certificate:
    return x509.load_pem_x509_certificate(path.read_bytes())


def verify_server(ca_cert: x509.Certificate, cert: x509.Certificate, host: str) -> None:
    subject: x509.verification.Subject
    try:
        subject = x509.IPAddress(ipaddress.ip_address(host))
    except ValueError:
        subject = x509.DNSName(host)
    verifier = PolicyBuilder().store(Store([ca_cert])).build_server_verifier(subject)
    verifier.verify(cert, [])


def verify_client(ca_cert: x509.Certificate, cert: x509.Certificate) -> None:
    # Kubernetes client certificates name a user, not a host: no subjectAltName,
    # which the WebPKI defaults would require.
    leaf_policy = ExtensionPolicy.webpki_defaults_ee().may_be_present(
        x509.SubjectAlternativeName, Criticality.AGNOSTIC, None
    )
    builder = PolicyBuilder().store(Store([ca_cert]))
    builder = builder.extension_policies(
        ca_policy=ExtensionPolicy.webpki_defaults_ca(), ee_policy=leaf_policy
    )
    builder.build_client_verifier().verify(cert, [])


def subject_attr(cert: x509.Certificate, oid: x509.ObjectIdentifier) -> list[str]:
    return [str(a.value) for a in cert.subject.get_attributes_for_oid(oid)]


def eku(cert: x509.Certificate) -> set[x509.ObjectIdentifier]:
    return set(cert.extensions.get_extension_for_class(x509.ExtendedKeyUsage).value)


def test_ca_is_a_self_signed_ca(ca: CertificateAuthority) -> None:
    ca.cert.verify_directly_issued_by(ca.cert)
    constraints = ca.cert.extensions.get_extension_for_class(x509.BasicConstraints)
    assert constraints.critical and constraints.value.ca
    assert ca.cert.extensions.get_extension_for_class(x509.KeyUsage).value.key_cert_sign
    assert isinstance(ca.key, ec.EllipticCurvePrivateKey)
    assert ca.key.curve.name == "secp256r1"


def test_server_cert_verifies_for_its_sans_only(ca: CertificateAuthority) -> None:
    cert_pem, key_pem = issue_cert(
        ca.cert,
        ca.key,
        "kubelet",
        dns_names=["node-a"],
        ip_addresses=["127.0.0.1"],
        server=True,
    )
    cert = x509.load_pem_x509_certificate(cert_pem)
    verify_server(ca.cert, cert, "127.0.0.1")
    verify_server(ca.cert, cert, "node-a")
    with pytest.raises(VerificationError):
        verify_server(ca.cert, cert, "10.0.0.1")
    with pytest.raises(VerificationError):
        verify_client(ca.cert, cert)  # no clientAuth usage
    assert eku(cert) == {ExtendedKeyUsageOID.SERVER_AUTH}
    key = load_pem_private_key(key_pem, password=None)
    assert isinstance(key, ec.EllipticCurvePrivateKey)
    assert key.public_key().public_numbers() == cert.public_key().public_numbers()


def test_client_cert_carries_user_and_groups(ca: CertificateAuthority) -> None:
    cert_pem, _ = ca.issue("jane", organizations=["team-a", "team-b"], client=True)
    cert = x509.load_pem_x509_certificate(cert_pem)
    verify_client(ca.cert, cert)
    assert subject_attr(cert, NameOID.COMMON_NAME) == ["jane"]
    assert subject_attr(cert, NameOID.ORGANIZATION_NAME) == ["team-a", "team-b"]
    assert eku(cert) == {ExtendedKeyUsageOID.CLIENT_AUTH}
    assert not cert.extensions.get_extension_for_class(x509.BasicConstraints).value.ca


def test_cert_from_another_ca_does_not_verify(ca: CertificateAuthority) -> None:
    other = CertificateAuthority.create("other-ca")
    cert_pem, _ = other.issue("x", ip_addresses=["127.0.0.1"], server=True, client=True)
    cert = x509.load_pem_x509_certificate(cert_pem)
    with pytest.raises(VerificationError):
        verify_server(ca.cert, cert, "127.0.0.1")
    with pytest.raises(VerificationError):
        verify_client(ca.cert, cert)


def test_leaf_needs_a_usage(ca: CertificateAuthority) -> None:
    with pytest.raises(ValueError, match="usage"):
        ca.issue("nothing")


def test_leaf_never_outlives_its_ca() -> None:
    short = CertificateAuthority.create("short-lived", days=2)
    cert_pem, _ = short.issue("x", client=True, days=365)
    cert = x509.load_pem_x509_certificate(cert_pem)
    assert cert.not_valid_after_utc <= short.cert.not_valid_after_utc


def test_apiserver_cert_covers_loopback_and_service_names(pki: ClusterPKI) -> None:
    """Loopback, the in-cluster names, and where pods with a network of their own
    reach it (pod_network.py)."""
    ca_cert = load_cert(pki.ca.cert)
    cert = load_cert(pki.apiserver.cert)
    hosts = ("127.0.0.1", "::1", KUBERNETES_SERVICE_IP, POD_NETWORK_API_IP)
    for host in (*hosts, *APISERVER_DNS_NAMES):
        verify_server(ca_cert, cert, host)
    san = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert set(san.get_values_for_type(x509.DNSName)) == set(APISERVER_DNS_NAMES)
    ips = {str(ip) for ip in san.get_values_for_type(x509.IPAddress)}
    assert ips == set(hosts)


@pytest.mark.parametrize(
    ("attr", "user", "groups"),
    [
        ("admin", "kubernetes-admin", ["system:masters"]),
        ("apiserver_kubelet_client", "kube-apiserver-kubelet-client", ["system:masters"]),
        ("controller_manager", "system:kube-controller-manager", []),
        ("scheduler", "system:kube-scheduler", []),
    ],
)
def test_cluster_client_certs(pki: ClusterPKI, attr: str, user: str, groups: list[str]) -> None:
    cert = load_cert(getattr(pki, attr).cert)
    verify_client(load_cert(pki.ca.cert), cert)
    assert subject_attr(cert, NameOID.COMMON_NAME) == [user]
    assert subject_attr(cert, NameOID.ORGANIZATION_NAME) == groups


@pytest.mark.parametrize("attr", ["apiserver", "controller_manager_serving", "scheduler_serving"])
def test_serving_certs_verify_for_loopback(pki: ClusterPKI, attr: str) -> None:
    verify_server(load_cert(pki.ca.cert), load_cert(getattr(pki, attr).cert), "127.0.0.1")


def test_four_separate_authorities(pki: ClusterPKI) -> None:
    cas = [load_cert(p.cert) for p in (pki.ca, pki.kubelet_ca, pki.etcd_ca, pki.front_proxy_ca)]
    assert len({ca.subject for ca in cas}) == 4
    spki = {
        c.public_key().public_bytes(Encoding.DER, PublicFormat.SubjectPublicKeyInfo) for c in cas
    }
    assert len(spki) == 4
    ca, _, etcd_ca, front_proxy_ca = cas
    # etcd trusts only its own CA: the admin certificate does not get in.
    with pytest.raises(VerificationError):
        verify_client(etcd_ca, load_cert(pki.admin.cert))
    verify_client(etcd_ca, load_cert(pki.apiserver_etcd_client.cert))
    verify_server(etcd_ca, load_cert(pki.etcd.cert), "127.0.0.1")
    front_proxy_client = load_cert(pki.front_proxy_client.cert)
    verify_client(front_proxy_ca, front_proxy_client)
    with pytest.raises(VerificationError):
        verify_client(ca, front_proxy_client)


def test_kubelet_ca_can_sign_serving_certs(pki: ClusterPKI) -> None:
    kubelet_ca = CertificateAuthority.load(pki.kubelet_ca.cert, pki.kubelet_ca.key)
    cert_pem, _ = kubelet_ca.issue("system:node:n1", ip_addresses=["127.0.0.1"], server=True)
    verify_server(kubelet_ca.cert, x509.load_pem_x509_certificate(cert_pem), "127.0.0.1")


def test_service_account_key_is_rsa_2048(pki: ClusterPKI) -> None:
    key = load_pem_private_key(pki.service_account_key.read_bytes(), password=None)
    assert isinstance(key, rsa.RSAPrivateKey)
    assert key.key_size == 2048
    assert b"PUBLIC KEY" in pki.service_account_pub.read_bytes()


def test_private_keys_are_private(pki: ClusterPKI) -> None:
    keys = sorted(pki.dir.glob("*.key"))
    assert len(keys) == 15
    for key in keys:
        assert stat.S_IMODE(key.stat().st_mode) == 0o600, key


def test_existing_pki_is_kept(pki: ClusterPKI) -> None:
    before = pki.ca.cert.read_bytes()
    again = write_cluster_pki(pki.dir)
    assert again.ca.cert.read_bytes() == before


async def test_tls_handshake_with_mutual_auth(ca: CertificateAuthority, tmp_path: Path) -> None:
    """The PEM files work with the ssl module as a real server and client use them."""
    for name, kwargs in {
        "server": {"ip_addresses": ["127.0.0.1"], "server": True},
        "client": {"organizations": ["g"], "client": True},
    }.items():
        cert_pem, key_pem = ca.issue(name, **kwargs)
        (tmp_path / f"{name}.crt").write_bytes(cert_pem)
        (tmp_path / f"{name}.key").write_bytes(key_pem)
    (tmp_path / "ca.crt").write_bytes(ca.cert_pem)

    server_ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH, cafile=tmp_path / "ca.crt")
    server_ctx.load_cert_chain(tmp_path / "server.crt", tmp_path / "server.key")
    server_ctx.verify_mode = ssl.CERT_REQUIRED
    seen: list[str] = []

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        peer = writer.get_extra_info("peercert")
        seen.append(dict(x[0] for x in peer["subject"])["commonName"])
        writer.write(await reader.readline())
        await writer.drain()
        writer.close()

    server = await asyncio.start_server(handle, "127.0.0.1", 0, ssl=server_ctx)
    port = server.sockets[0].getsockname()[1]
    client_ctx = ssl.create_default_context(cafile=tmp_path / "ca.crt")
    client_ctx.load_cert_chain(tmp_path / "client.crt", tmp_path / "client.key")
    async with server:
        reader, writer = await asyncio.open_connection("127.0.0.1", port, ssl=client_ctx)
        writer.write(b"ping\n")
        assert await reader.readline() == b"ping\n"
        writer.close()
    assert seen == ["client"]
