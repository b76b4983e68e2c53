"""X.509 work with cryptography, run in a short-lived child process of the agent.

cryptography's Rust extension is about 10 MiB resident once loaded, and a shared
library is never unloaded: 15% of what kwok's whole process takes with 1000 pods.
The agent needs it only to make or read its serving certificate (at start, when the
files change, at a CSR rotation), so `vkpy.api.certs.x509` runs these functions here, in
`python -m vkpy.api.certs.x509_work`, one JSON request on stdin and one answer on stdout, and
the agent's own process never imports cryptography. This module imports nothing of
vkpy (its package `__init__` is empty), so the child starts in tens of milliseconds.

Answers carry PEM as text and times as POSIX seconds; a certificate or key that
cannot be used is `{"error": "..."}` (the parent raises CertificateError with it).
"""

from __future__ import annotations

import datetime
import ipaddress
import json
import sys
from collections.abc import Sequence
from typing import Any

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

SELF_SIGNED_DAYS = 365
_BACKDATE = datetime.timedelta(minutes=5)

Answer = dict[str, Any]


class Unusable(ValueError):
    """A certificate or key that cannot be used; the message says why."""


def load_pair(cert_pem: bytes, key_pem: bytes) -> Answer:
    """A certificate chain and its key, checked and described."""
    try:
        chain = x509.load_pem_x509_certificates(cert_pem)
    except ValueError as error:
        raise Unusable(f"not a PEM certificate: {error}") from error
    try:
        key = serialization.load_pem_private_key(key_pem, password=None)
    except (ValueError, TypeError) as error:
        raise Unusable(f"not an unencrypted PEM private key: {error}") from error
    leaf = chain[0]
    if leaf.public_key() != key.public_key():
        raise Unusable("the private key does not match the certificate")
    try:
        san = leaf.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
        dns = list(san.get_values_for_type(x509.DNSName))
        ips = [str(ip) for ip in san.get_values_for_type(x509.IPAddress)]
    except x509.ExtensionNotFound:
        dns, ips = [], []
    common = leaf.subject.get_attributes_for_oid(NameOID.COMMON_NAME)
    return {
        "cert_pem": cert_pem.decode(),
        "key_pem": key_pem.decode(),
        "not_before": leaf.not_valid_before_utc.timestamp(),
        "not_after": leaf.not_valid_after_utc.timestamp(),
        "common_name": str(common[0].value) if common else "",
        "dns_names": dns,
        "ip_addresses": ips,
    }


def _key_pem(key: ec.EllipticCurvePrivateKey | rsa.RSAPrivateKey) -> bytes:
    return key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )


def _san(ips: Sequence[str], names: Sequence[str]) -> x509.SubjectAlternativeName:
    general: list[x509.GeneralName] = [x509.DNSName(n) for n in names]
    general += [x509.IPAddress(ipaddress.ip_address(ip)) for ip in ips]
    return x509.SubjectAlternativeName(general)


def self_signed(host: str, ips: Sequence[str], names: Sequence[str], now: float) -> Answer:
    """A self-signed serving pair for `host`, valid for these SANs for a year."""
    key = ec.generate_private_key(ec.SECP256R1())
    start = datetime.datetime.fromtimestamp(now, datetime.UTC)
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, f"{host}@{int(now)}")])
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(start - _BACKDATE)
        .not_valid_after(start + datetime.timedelta(days=SELF_SIGNED_DAYS))
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
        .add_extension(_san(ips, names), critical=False)
        .sign(key, hashes.SHA256())
    )
    return load_pair(cert.public_bytes(serialization.Encoding.PEM), _key_pem(key))


def serving_csr(
    organization: str, common_name: str, ips: Sequence[str], names: Sequence[str]
) -> Answer:
    """A kubelet-serving CSR (subject O=`organization`, CN=`common_name`) and its new
    key, as PEM."""
    key = ec.generate_private_key(ec.SECP256R1())
    subject = x509.Name(
        [
            x509.NameAttribute(NameOID.ORGANIZATION_NAME, organization),
            x509.NameAttribute(NameOID.COMMON_NAME, common_name),
        ]
    )
    csr = (
        x509.CertificateSigningRequestBuilder()
        .subject_name(subject)
        .add_extension(_san(ips, names), critical=False)
        .sign(key, hashes.SHA256())
    )
    return {
        "csr_pem": csr.public_bytes(serialization.Encoding.PEM).decode(),
        "key_pem": _key_pem(key).decode(),
    }


def answer(request: dict[str, Any]) -> Answer:
    """The answer to one request (see the module's docstring)."""
    op = request.get("op")
    try:
        if op == "load_pair":
            return load_pair(request["cert_pem"].encode(), request["key_pem"].encode())
        if op == "self_signed":
            return self_signed(request["host"], request["ips"], request["names"], request["now"])
        if op == "serving_csr":
            return serving_csr(
                request["organization"], request["common_name"], request["ips"], request["names"]
            )
    except Unusable as error:
        return {"error": str(error)}
    return {"error": f"unknown request {op!r}"}


def main() -> int:
    json.dump(answer(json.load(sys.stdin)), sys.stdout)
    return 0


if __name__ == "__main__":
    sys.exit(main())
