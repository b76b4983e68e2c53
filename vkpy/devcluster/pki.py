"""Certificates and keys for the local development control plane.

A real cluster's components only trust each other through X.509: the API server
verifies client certificates against one CA, the controller-manager signs approved
kubelet-serving CSRs with another, and the API server presents its own client
certificate when it dials a kubelet. This module creates that PKI with `cryptography`
so the dev cluster is wired the way kubeadm wires a real one, and exposes
`issue_cert` so tests and tools can mint certificates (for example a fake kubelet's
serving certificate) from the same authorities.
"""

from __future__ import annotations

import datetime
import ipaddress
import os
import secrets
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from cryptography.hazmat.primitives.asymmetric.types import (
    CertificateIssuerPrivateKeyTypes,
)
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address
PrivateKey = ec.EllipticCurvePrivateKey | rsa.RSAPrivateKey

#: SANs of the API server's serving certificate: loopback plus the in-cluster names.
APISERVER_DNS_NAMES = (
    "localhost",
    "kubernetes",
    "kubernetes.default",
    "kubernetes.default.svc",
    "kubernetes.default.svc.cluster.local",
)
APISERVER_IPS = ("127.0.0.1", "::1")

#: Certificates are backdated this much so a few seconds of clock skew do not matter.
_BACKDATE = datetime.timedelta(minutes=5)


def new_ec_key() -> ec.EllipticCurvePrivateKey:
    """A fresh ECDSA P-256 private key (what every certificate here uses)."""
    return ec.generate_private_key(ec.SECP256R1())


def new_rsa_key(bits: int = 2048) -> rsa.RSAPrivateKey:
    """A fresh RSA private key (the service-account signing key)."""
    return rsa.generate_private_key(public_exponent=65537, key_size=bits)


def key_to_pem(key: PrivateKey) -> bytes:
    """PKCS#8 PEM, unencrypted: what every Kubernetes component reads."""
    return key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )


def public_key_to_pem(key: PrivateKey) -> bytes:
    """SubjectPublicKeyInfo PEM of the key's public half."""
    return key.public_key().public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
    )


def cert_to_pem(cert: x509.Certificate) -> bytes:
    return cert.public_bytes(serialization.Encoding.PEM)


def _name(common_name: str, organizations: Iterable[str] = ()) -> x509.Name:
    attributes = [x509.NameAttribute(NameOID.ORGANIZATION_NAME, o) for o in organizations]
    attributes.append(x509.NameAttribute(NameOID.COMMON_NAME, common_name))
    return x509.Name(attributes)


def _validity(days: int) -> tuple[datetime.datetime, datetime.datetime]:
    now = datetime.datetime.now(datetime.UTC)
    return now - _BACKDATE, now + datetime.timedelta(days=days)


def _sign_algorithm(key: CertificateIssuerPrivateKeyTypes) -> hashes.SHA256 | None:
    # Ed25519/Ed448 keys sign without a separate hash; everything else uses SHA-256.
    if isinstance(key, ec.EllipticCurvePrivateKey | rsa.RSAPrivateKey):
        return hashes.SHA256()
    return None


@dataclass(frozen=True)
class CertificateAuthority:
    """A CA certificate and its private key, able to issue leaf certificates."""

    cert: x509.Certificate
    key: CertificateIssuerPrivateKeyTypes

    @classmethod
    def create(cls, common_name: str, days: int = 3650) -> CertificateAuthority:
        """A new self-signed CA with an ECDSA P-256 key."""
        key = new_ec_key()
        not_before, not_after = _validity(days)
        ski = x509.SubjectKeyIdentifier.from_public_key(key.public_key())
        cert = (
            x509.CertificateBuilder()
            .subject_name(_name(common_name))
            .issuer_name(_name(common_name))
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(not_before)
            .not_valid_after(not_after)
            .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
            .add_extension(_ca_key_usage(), critical=True)
            .add_extension(ski, critical=False)
            .add_extension(
                x509.AuthorityKeyIdentifier.from_issuer_subject_key_identifier(ski),
                critical=False,
            )
            .sign(key, hashes.SHA256())
        )
        return cls(cert=cert, key=key)

    @classmethod
    def load(cls, cert_path: Path, key_path: Path) -> CertificateAuthority:
        """Read a CA written by `write` (or any PEM certificate and unencrypted key)."""
        cert = x509.load_pem_x509_certificate(cert_path.read_bytes())
        key = serialization.load_pem_private_key(key_path.read_bytes(), password=None)
        if not isinstance(key, ec.EllipticCurvePrivateKey | rsa.RSAPrivateKey):
            raise ValueError(f"{key_path}: unsupported CA key type {type(key).__name__}")
        return cls(cert=cert, key=key)

    @property
    def cert_pem(self) -> bytes:
        return cert_to_pem(self.cert)

    def write(self, cert_path: Path, key_path: Path) -> None:
        write_pem(cert_path, self.cert_pem)
        write_pem(key_path, key_to_pem(_as_private_key(self.key)), secret=True)

    def issue(
        self,
        common_name: str,
        *,
        organizations: Iterable[str] = (),
        dns_names: Iterable[str] = (),
        ip_addresses: Iterable[str | IPAddress] = (),
        client: bool = False,
        server: bool = False,
        days: int = 365,
    ) -> tuple[bytes, bytes]:
        """Issue a leaf certificate; see `issue_cert`."""
        return issue_cert(
            self.cert,
            self.key,
            common_name,
            organizations=organizations,
            dns_names=dns_names,
            ip_addresses=ip_addresses,
            client=client,
            server=server,
            days=days,
        )


def _ca_key_usage() -> x509.KeyUsage:
    return x509.KeyUsage(
        digital_signature=True,
        content_commitment=False,
        key_encipherment=False,
        data_encipherment=False,
        key_agreement=False,
        key_cert_sign=True,
        crl_sign=True,
        encipher_only=False,
        decipher_only=False,
    )


def _leaf_key_usage() -> x509.KeyUsage:
    # Leaf keys are ECDSA: key encipherment (RSA key transport) does not apply.
    return x509.KeyUsage(
        digital_signature=True,
        content_commitment=False,
        key_encipherment=False,
        data_encipherment=False,
        key_agreement=False,
        key_cert_sign=False,
        crl_sign=False,
        encipher_only=False,
        decipher_only=False,
    )


def _extended_key_usage(client: bool, server: bool) -> x509.ExtendedKeyUsage:
    usages = []
    if server:
        usages.append(ExtendedKeyUsageOID.SERVER_AUTH)
    if client:
        usages.append(ExtendedKeyUsageOID.CLIENT_AUTH)
    return x509.ExtendedKeyUsage(usages)


def _san(
    dns_names: Iterable[str], ip_addresses: Iterable[str | IPAddress]
) -> list[x509.GeneralName]:
    names: list[x509.GeneralName] = [x509.DNSName(n) for n in dns_names]
    names += [x509.IPAddress(ipaddress.ip_address(ip)) for ip in ip_addresses]
    return names


def _authority_key_identifier(ca_cert: x509.Certificate) -> x509.AuthorityKeyIdentifier:
    try:
        ski = ca_cert.extensions.get_extension_for_class(x509.SubjectKeyIdentifier).value
    except x509.ExtensionNotFound:
        ski = x509.SubjectKeyIdentifier.from_public_key(ca_cert.public_key())
    return x509.AuthorityKeyIdentifier.from_issuer_subject_key_identifier(ski)


def _as_private_key(key: CertificateIssuerPrivateKeyTypes) -> PrivateKey:
    if not isinstance(key, ec.EllipticCurvePrivateKey | rsa.RSAPrivateKey):
        raise TypeError(f"unsupported key type {type(key).__name__}")
    return key


def issue_cert(
    ca_cert: x509.Certificate,
    ca_key: CertificateIssuerPrivateKeyTypes,
    common_name: str,
    *,
    organizations: Iterable[str] = (),
    dns_names: Iterable[str] = (),
    ip_addresses: Iterable[str | IPAddress] = (),
    client: bool = False,
    server: bool = False,
    days: int = 365,
) -> tuple[bytes, bytes]:
    """Issue a leaf certificate with a new ECDSA P-256 key, signed by the given CA.

    `organizations` become the subject's O attributes (Kubernetes groups for client
    certificates), `dns_names`/`ip_addresses` its subjectAltName, `client`/`server`
    its extended key usages. Returns `(cert_pem, key_pem)`.
    """
    if not (client or server):
        raise ValueError("a leaf certificate needs client and/or server usage")
    key = new_ec_key()
    not_before, not_after = _validity(days)
    builder = (
        x509.CertificateBuilder()
        .subject_name(_name(common_name, organizations))
        .issuer_name(ca_cert.subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(not_before)
        .not_valid_after(min(not_after, ca_cert.not_valid_after_utc))
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(_leaf_key_usage(), critical=True)
        .add_extension(_extended_key_usage(client, server), critical=False)
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), False)
        .add_extension(_authority_key_identifier(ca_cert), critical=False)
    )
    san = _san(dns_names, ip_addresses)
    if san:
        builder = builder.add_extension(x509.SubjectAlternativeName(san), critical=False)
    cert = builder.sign(ca_key, _sign_algorithm(ca_key))
    return cert_to_pem(cert), key_to_pem(key)


def write_pem(path: Path, data: bytes, *, secret: bool = False) -> None:
    """Write a PEM file atomically; private keys get mode 0600 from the start."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{secrets.token_hex(4)}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600 if secret else 0o644)
    with os.fdopen(fd, "wb") as f:
        f.write(data)
    tmp.replace(path)


@dataclass(frozen=True)
class CertPaths:
    """Where one certificate and its key live on disk."""

    cert: Path
    key: Path


@dataclass(frozen=True)
class ClusterPKI:
    """The file layout of the dev cluster's PKI (all under one directory).

    Three authorities: `ca` is the cluster CA (the API server's `--client-ca-file`,
    signs every control-plane certificate); `kubelet_ca` signs kubelet serving
    certificates (the controller-manager's kubelet-serving signer, and the API
    server's `--kubelet-certificate-authority` when verification is on); `etcd_ca`
    is trusted only by etcd, so no certificate the cluster CA or a CSR produces can
    talk to etcd directly.
    """

    dir: Path

    def _pair(self, stem: str) -> CertPaths:
        return CertPaths(self.dir / f"{stem}.crt", self.dir / f"{stem}.key")

    @property
    def ca(self) -> CertPaths:
        return self._pair("ca")

    @property
    def kubelet_ca(self) -> CertPaths:
        return self._pair("kubelet-ca")

    @property
    def etcd_ca(self) -> CertPaths:
        return self._pair("etcd-ca")

    @property
    def apiserver(self) -> CertPaths:
        return self._pair("apiserver")

    @property
    def apiserver_kubelet_client(self) -> CertPaths:
        return self._pair("apiserver-kubelet-client")

    @property
    def apiserver_etcd_client(self) -> CertPaths:
        return self._pair("apiserver-etcd-client")

    @property
    def etcd(self) -> CertPaths:
        return self._pair("etcd")

    @property
    def admin(self) -> CertPaths:
        return self._pair("admin")

    @property
    def controller_manager(self) -> CertPaths:
        return self._pair("controller-manager")

    @property
    def scheduler(self) -> CertPaths:
        return self._pair("scheduler")

    @property
    def service_account_key(self) -> Path:
        return self.dir / "sa.key"

    @property
    def service_account_pub(self) -> Path:
        return self.dir / "sa.pub"

    def exists(self) -> bool:
        """True when every file is present (an interrupted write starts over)."""
        return all(p.exists() for p in self._all_files())

    def _all_files(self) -> list[Path]:
        pairs = [
            self.ca,
            self.kubelet_ca,
            self.etcd_ca,
            self.apiserver,
            self.apiserver_kubelet_client,
            self.apiserver_etcd_client,
            self.etcd,
            self.admin,
            self.controller_manager,
            self.scheduler,
        ]
        files = [p for pair in pairs for p in (pair.cert, pair.key)]
        return [*files, self.service_account_key, self.service_account_pub]


@dataclass(frozen=True)
class _LeafSpec:
    """One leaf certificate of the cluster PKI: who issues it and what it says."""

    paths: CertPaths
    common_name: str
    organizations: tuple[str, ...] = ()
    dns_names: tuple[str, ...] = ()
    ip_addresses: tuple[str, ...] = ()
    client: bool = False
    server: bool = False


def _leaf_specs(pki: ClusterPKI) -> list[tuple[str, _LeafSpec]]:
    """(issuing authority, spec) for every leaf certificate."""
    masters = ("system:masters",)
    loopback = ("127.0.0.1", "::1")
    return [
        (
            "ca",
            _LeafSpec(
                pki.apiserver,
                "kube-apiserver",
                dns_names=APISERVER_DNS_NAMES,
                ip_addresses=APISERVER_IPS,
                server=True,
            ),
        ),
        (
            "ca",
            _LeafSpec(
                pki.apiserver_kubelet_client,
                "kube-apiserver-kubelet-client",
                masters,
                client=True,
            ),
        ),
        ("ca", _LeafSpec(pki.admin, "kubernetes-admin", masters, client=True)),
        (
            "ca",
            _LeafSpec(pki.controller_manager, "system:kube-controller-manager", client=True),
        ),
        ("ca", _LeafSpec(pki.scheduler, "system:kube-scheduler", client=True)),
        (
            "etcd_ca",
            _LeafSpec(
                pki.etcd,
                "etcd",
                dns_names=("localhost",),
                ip_addresses=loopback,
                client=True,
                server=True,
            ),
        ),
        (
            "etcd_ca",
            _LeafSpec(pki.apiserver_etcd_client, "kube-apiserver-etcd-client", client=True),
        ),
    ]


def write_cluster_pki(directory: Path) -> ClusterPKI:
    """Create the whole PKI in `directory`, or keep it if it is already complete.

    Keeping it lets a stopped cluster restart with the same identity (kubeconfigs
    handed out earlier stay valid, service-account tokens keep verifying).
    """
    pki = ClusterPKI(directory)
    if pki.exists():
        return pki
    directory.mkdir(parents=True, exist_ok=True)
    os.chmod(directory, 0o700)
    authorities = {
        "ca": CertificateAuthority.create("vkpy-dev-cluster-ca"),
        "kubelet_ca": CertificateAuthority.create("vkpy-dev-kubelet-signing-ca"),
        "etcd_ca": CertificateAuthority.create("vkpy-dev-etcd-ca"),
    }
    for attr, authority in authorities.items():
        paths: CertPaths = getattr(pki, attr)
        authority.write(paths.cert, paths.key)
    for issuer, spec in _leaf_specs(pki):
        cert_pem, key_pem = authorities[issuer].issue(
            spec.common_name,
            organizations=spec.organizations,
            dns_names=spec.dns_names,
            ip_addresses=spec.ip_addresses,
            client=spec.client,
            server=spec.server,
        )
        write_pem(spec.paths.cert, cert_pem)
        write_pem(spec.paths.key, key_pem, secret=True)
    sa_key = new_rsa_key()
    write_pem(pki.service_account_key, key_to_pem(sa_key), secret=True)
    write_pem(pki.service_account_pub, public_key_to_pem(sa_key))
    return pki
