"""X.509 work for the serving certificate: keys, self-signed pairs, CSRs, lifetimes.

The kubelet API's certificate comes from files, from a self-signed pair made here
for development, or from the cluster through a CertificateSigningRequest. All three
need the same few operations on PEM data (check that a key matches its certificate,
read validity and names, build a kubelet-serving CSR, pick a renewal time), kept here
as pure functions so the TLS and rotation code stays about I/O and timing.
"""

from __future__ import annotations

import datetime
import ipaddress
import os
import random
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

NODES_GROUP = "system:nodes"
NODE_USER_PREFIX = "system:node:"
SELF_SIGNED_DAYS = 365
_BACKDATE = datetime.timedelta(minutes=5)
_PEM_BLOCK = re.compile(rb"-----BEGIN ([A-Z0-9 ]+)-----.+?-----END \1-----", re.S)


class CertificateError(ValueError):
    """A certificate or key cannot be used; the message says why."""


@dataclass(frozen=True)
class ServingPair:
    """A serving certificate (with its chain) and its private key, as PEM."""

    cert_pem: bytes
    key_pem: bytes
    not_before: datetime.datetime
    not_after: datetime.datetime
    common_name: str
    dns_names: tuple[str, ...]
    ip_addresses: tuple[str, ...]

    def remaining(self, now: datetime.datetime) -> datetime.timedelta:
        return self.not_after - now

    def covers(self, addresses: Iterable[str]) -> bool:
        """Every address is among the certificate's SANs (IP or DNS)."""
        names = set(self.dns_names) | {_canonical_ip(ip) or ip for ip in self.ip_addresses}
        return all((_canonical_ip(a) or a) in names for a in addresses)


def _canonical_ip(text: str) -> str | None:
    try:
        return str(ipaddress.ip_address(text))
    except ValueError:
        return None


def split_addresses(addresses: Iterable[str]) -> tuple[list[str], list[str]]:
    """(IP addresses, DNS names) without duplicates, in order."""
    ips: list[str] = []
    names: list[str] = []
    for address in addresses:
        ip = _canonical_ip(address)
        if ip is not None:
            if ip not in ips:
                ips.append(ip)
        elif address and address not in names:
            names.append(address)
    return ips, names


def load_pair(cert_pem: bytes, key_pem: bytes) -> ServingPair:
    """Parse and check a certificate chain and key; CertificateError if unusable."""
    try:
        chain = x509.load_pem_x509_certificates(cert_pem)
    except ValueError as error:
        raise CertificateError(f"not a PEM certificate: {error}") from error
    try:
        key = serialization.load_pem_private_key(key_pem, password=None)
    except (ValueError, TypeError) as error:
        raise CertificateError(f"not an unencrypted PEM private key: {error}") from error
    leaf = chain[0]
    if leaf.public_key() != key.public_key():
        raise CertificateError("the private key does not match the certificate")
    try:
        san = leaf.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
        dns = tuple(san.get_values_for_type(x509.DNSName))
        ips = tuple(str(ip) for ip in san.get_values_for_type(x509.IPAddress))
    except x509.ExtensionNotFound:
        dns, ips = (), ()
    common = leaf.subject.get_attributes_for_oid(NameOID.COMMON_NAME)
    return ServingPair(
        cert_pem=cert_pem,
        key_pem=key_pem,
        not_before=leaf.not_valid_before_utc,
        not_after=leaf.not_valid_after_utc,
        common_name=str(common[0].value) if common else "",
        dns_names=dns,
        ip_addresses=ips,
    )


def load_combined(pem: bytes) -> ServingPair:
    """A pair from one PEM file holding the certificate(s) and the key (any order)."""
    certs: list[bytes] = []
    keys: list[bytes] = []
    for block in _PEM_BLOCK.finditer(pem):
        (keys if block.group(1).endswith(b"PRIVATE KEY") else certs).append(block.group(0))
    if not certs or len(keys) != 1:
        raise CertificateError("want one or more certificates and exactly one private key")
    return load_pair(b"\n".join(certs), keys[0])


def new_key() -> ec.EllipticCurvePrivateKey:
    return ec.generate_private_key(ec.SECP256R1())


def key_pem(key: ec.EllipticCurvePrivateKey | rsa.RSAPrivateKey) -> bytes:
    return key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )


def _san(addresses: Sequence[str]) -> x509.SubjectAlternativeName:
    ips, names = split_addresses(addresses)
    general: list[x509.GeneralName] = [x509.DNSName(n) for n in names]
    general += [x509.IPAddress(ipaddress.ip_address(ip)) for ip in ips]
    return x509.SubjectAlternativeName(general)


def self_signed(
    host: str, addresses: Sequence[str], now: datetime.datetime | None = None
) -> ServingPair:
    """A self-signed serving pair for `host` valid for the given addresses, one year."""
    key = new_key()
    now = now or datetime.datetime.now(datetime.UTC)
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, f"{host}@{int(now.timestamp())}")])
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - _BACKDATE)
        .not_valid_after(now + datetime.timedelta(days=SELF_SIGNED_DAYS))
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True,
                content_commitment=False,
                key_encipherment=False,
                data_encipherment=False,
                key_agreement=False,
                key_cert_sign=False,
                crl_sign=False,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
        .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
        .add_extension(_san([host, *addresses]), critical=False)
        .sign(key, hashes.SHA256())
    )
    return load_pair(cert.public_bytes(serialization.Encoding.PEM), key_pem(key))


def serving_csr(node_name: str, addresses: Sequence[str]) -> tuple[bytes, bytes]:
    """(CSR PEM, key PEM) for a kubelet-serving certificate of `node_name`."""
    if not addresses:
        raise CertificateError("a kubelet-serving CSR needs at least one DNS or IP address")
    key = new_key()
    subject = x509.Name(
        [
            x509.NameAttribute(NameOID.ORGANIZATION_NAME, NODES_GROUP),
            x509.NameAttribute(NameOID.COMMON_NAME, NODE_USER_PREFIX + node_name),
        ]
    )
    csr = (
        x509.CertificateSigningRequestBuilder()
        .subject_name(subject)
        .add_extension(_san(addresses), critical=False)
        .sign(key, hashes.SHA256())
    )
    return csr.public_bytes(serialization.Encoding.PEM), key_pem(key)


def rotation_deadline(pair: ServingPair, rng: random.Random | None = None) -> datetime.datetime:
    """When to renew: at a random point between 70% and 90% of the certificate's life
    (as client-go's certificate manager does, so nodes do not all renew at once)."""
    life = pair.not_after - pair.not_before
    fraction = 0.7 + 0.2 * (rng or random.Random()).random()
    return pair.not_before + life * fraction


def write_private(path: Path, data: bytes) -> None:
    """Write atomically with mode 0600 (it may hold a private key)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        os.write(fd, data)
        os.fsync(fd)
    finally:
        os.close(fd)
    os.replace(tmp, path)
