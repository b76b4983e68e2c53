"""X.509 work for the serving certificate: keys, self-signed pairs, CSRs, lifetimes.

The kubelet API's certificate comes from files, from a self-signed pair made here
for development, or from the cluster through a CertificateSigningRequest. All three
need the same few operations on PEM data (check that a key matches its certificate,
read validity and names, build a kubelet-serving CSR, pick a renewal time), kept here
as functions so the TLS and rotation code stays about I/O and timing.

The ones that parse or build X.509 run `vkpy.api.certs.x509_work` in a short-lived child
process (one per call, tens of milliseconds): the agent needs cryptography only at
those moments, and its extension would otherwise stay resident (about 10 MiB) for the
process's life. The agent authenticates clients from ssl's own decoding of their
certificates (vkpy.api.auth.authn), so it never imports cryptography at all.
"""

from __future__ import annotations

import datetime
import ipaddress
import json
import os
import random
import re
import subprocess
import sys
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

NODES_GROUP = "system:nodes"
NODE_USER_PREFIX = "system:node:"
WORK_TIMEOUT = 60.0
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


def _work(request: dict[str, Any]) -> dict[str, Any]:
    """One request answered by `python -m vkpy.api.certs.x509_work` (see the module docstring)."""
    package_root = str(Path(__file__).resolve().parents[2])
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (package_root, env.get("PYTHONPATH", "")) if p)
    try:
        done = subprocess.run(
            [sys.executable, "-m", "vkpy.api.certs.x509_work"],
            input=json.dumps(request).encode(),
            capture_output=True,
            env=env,
            timeout=WORK_TIMEOUT,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired) as error:
        raise CertificateError(f"certificate work failed to run: {error}") from error
    if done.returncode != 0:
        tail = done.stderr.decode(errors="replace").strip().splitlines()[-1:]
        raise CertificateError(f"certificate work failed: {' '.join(tail) or done.returncode}")
    answer: dict[str, Any] = json.loads(done.stdout)
    if "error" in answer:
        raise CertificateError(str(answer["error"]))
    return answer


def _pair(answer: dict[str, Any]) -> ServingPair:
    def when(seconds: float) -> datetime.datetime:
        return datetime.datetime.fromtimestamp(seconds, datetime.UTC)

    return ServingPair(
        cert_pem=str(answer["cert_pem"]).encode(),
        key_pem=str(answer["key_pem"]).encode(),
        not_before=when(answer["not_before"]),
        not_after=when(answer["not_after"]),
        common_name=str(answer["common_name"]),
        dns_names=tuple(answer["dns_names"]),
        ip_addresses=tuple(answer["ip_addresses"]),
    )


def load_pair(cert_pem: bytes, key_pem: bytes) -> ServingPair:
    """Parse and check a certificate chain and key; CertificateError if unusable."""
    try:
        request = {"op": "load_pair", "cert_pem": cert_pem.decode(), "key_pem": key_pem.decode()}
    except UnicodeDecodeError as error:
        raise CertificateError(f"not PEM: {error}") from error
    return _pair(_work(request))


def load_combined(pem: bytes) -> ServingPair:
    """A pair from one PEM file holding the certificate(s) and the key (any order)."""
    certs: list[bytes] = []
    keys: list[bytes] = []
    for block in _PEM_BLOCK.finditer(pem):
        (keys if block.group(1).endswith(b"PRIVATE KEY") else certs).append(block.group(0))
    if not certs or len(keys) != 1:
        raise CertificateError("want one or more certificates and exactly one private key")
    return load_pair(b"\n".join(certs), keys[0])


def self_signed(
    host: str, addresses: Sequence[str], now: datetime.datetime | None = None
) -> ServingPair:
    """A self-signed serving pair for `host` valid for the given addresses, one year."""
    ips, names = split_addresses([host, *addresses])
    now = now or datetime.datetime.now(datetime.UTC)
    request = {
        "op": "self_signed",
        "host": host,
        "ips": ips,
        "names": names,
        "now": now.timestamp(),
    }
    return _pair(_work(request))


def serving_csr(node_name: str, addresses: Sequence[str]) -> tuple[bytes, bytes]:
    """(CSR PEM, key PEM) for a kubelet-serving certificate of `node_name`."""
    if not addresses:
        raise CertificateError("a kubelet-serving CSR needs at least one DNS or IP address")
    ips, names = split_addresses(addresses)
    answer = _work(
        {
            "op": "serving_csr",
            "organization": NODES_GROUP,
            "common_name": NODE_USER_PREFIX + node_name,
            "ips": ips,
            "names": names,
        }
    )
    return str(answer["csr_pem"]).encode(), str(answer["key_pem"]).encode()


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
