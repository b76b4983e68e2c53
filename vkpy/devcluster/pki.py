"""Minting X.509 certificate authorities and certificates with `cryptography`.

Kubernetes components only trust each other through X.509: client certificates name
users and groups, serving certificates name hosts, and each is checked against a CA.
The dev cluster needs a handful of these (see `cluster_pki`), and tests and tools need
more of the same kind, for example a fake kubelet's serving certificate signed by the
cluster's kubelet signing CA. This module is the one small place that knows how to
make them right (key usages, SANs, identifiers) so nobody hand-rolls another.
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
            .add_extension(_key_usage(ca=True), critical=True)
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


def _key_usage(ca: bool) -> x509.KeyUsage:
    """Digital signature, plus certificate and CRL signing for a CA. Leaf keys are ECDSA,
    so key encipherment (RSA key transport) does not apply."""
    return x509.KeyUsage(
        digital_signature=True,
        content_commitment=False,
        key_encipherment=False,
        data_encipherment=False,
        key_agreement=False,
        key_cert_sign=ca,
        crl_sign=ca,
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
        .add_extension(_key_usage(ca=False), critical=True)
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
