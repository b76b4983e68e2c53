"""Which TLS versions and cipher suites the kubelet API offers, named as the kubelet names them.

The kubelet takes `--tls-min-version` (VersionTLS12, VersionTLS13) and
`--tls-cipher-suites` (IANA names, comma-separated, as Go's crypto/tls spells them)
and, without them, offers what Go offers by default: for TLS 1.2, only ECDHE key
exchange with AEAD ciphers (AES-GCM, ChaCha20-Poly1305). OpenSSL names the same
suites differently, so this module maps them; OpenSSL's own default would also offer
CBC suites. TLS 1.3 suites cannot be chosen (Go ignores them in the list, and so
does vkpy); VersionTLS10 and VersionTLS11 are refused, vkpy never speaks them. A
list naming only TLS 1.3 suites leaves TLS 1.2 without any, so TLS 1.3 is then the
oldest version offered. Pure functions; vkpy.api.certs.tls applies the result.
"""

from __future__ import annotations

import ssl
from collections.abc import Sequence
from dataclasses import dataclass

DEFAULT_CIPHER_SUITES = (
    "TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256",
    "TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256",
    "TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384",
    "TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384",
    "TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256",
    "TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305_SHA256",
)
"""Go's default TLS 1.2 suites: ECDHE, AEAD only."""

_OPENSSL_NAMES = {
    "TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256": "ECDHE-ECDSA-AES128-GCM-SHA256",
    "TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256": "ECDHE-RSA-AES128-GCM-SHA256",
    "TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384": "ECDHE-ECDSA-AES256-GCM-SHA384",
    "TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384": "ECDHE-RSA-AES256-GCM-SHA384",
    "TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256": "ECDHE-ECDSA-CHACHA20-POLY1305",
    "TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305_SHA256": "ECDHE-RSA-CHACHA20-POLY1305",
    "TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305": "ECDHE-ECDSA-CHACHA20-POLY1305",
    "TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305": "ECDHE-RSA-CHACHA20-POLY1305",
    "TLS_ECDHE_ECDSA_WITH_AES_128_CBC_SHA": "ECDHE-ECDSA-AES128-SHA",
    "TLS_ECDHE_ECDSA_WITH_AES_256_CBC_SHA": "ECDHE-ECDSA-AES256-SHA",
    "TLS_ECDHE_RSA_WITH_AES_128_CBC_SHA": "ECDHE-RSA-AES128-SHA",
    "TLS_ECDHE_RSA_WITH_AES_256_CBC_SHA": "ECDHE-RSA-AES256-SHA",
    "TLS_ECDHE_ECDSA_WITH_AES_128_CBC_SHA256": "ECDHE-ECDSA-AES128-SHA256",
    "TLS_ECDHE_RSA_WITH_AES_128_CBC_SHA256": "ECDHE-RSA-AES128-SHA256",
    "TLS_RSA_WITH_AES_128_GCM_SHA256": "AES128-GCM-SHA256",
    "TLS_RSA_WITH_AES_256_GCM_SHA384": "AES256-GCM-SHA384",
    "TLS_RSA_WITH_AES_128_CBC_SHA": "AES128-SHA",
    "TLS_RSA_WITH_AES_256_CBC_SHA": "AES256-SHA",
    "TLS_RSA_WITH_AES_128_CBC_SHA256": "AES128-SHA256",
    "TLS_RSA_WITH_3DES_EDE_CBC_SHA": "DES-CBC3-SHA",
    "TLS_ECDHE_RSA_WITH_3DES_EDE_CBC_SHA": "ECDHE-RSA-DES-CBC3-SHA",
    "TLS_RSA_WITH_RC4_128_SHA": "RC4-SHA",
    "TLS_ECDHE_RSA_WITH_RC4_128_SHA": "ECDHE-RSA-RC4-SHA",
    "TLS_ECDHE_ECDSA_WITH_RC4_128_SHA": "ECDHE-ECDSA-RC4-SHA",
}
_TLS13_NAMES = frozenset(
    {"TLS_AES_128_GCM_SHA256", "TLS_AES_256_GCM_SHA384", "TLS_CHACHA20_POLY1305_SHA256"}
)
MIN_VERSIONS = {"VersionTLS12": ssl.TLSVersion.TLSv1_2, "VersionTLS13": ssl.TLSVersion.TLSv1_3}


class TLSOptionsError(ValueError):
    """A version or suite name vkpy cannot offer; the message says which and why."""


@dataclass(frozen=True)
class TLSOptions:
    """The oldest version and the TLS 1.2 suites (OpenSSL's cipher string) offered."""

    minimum: ssl.TLSVersion = ssl.TLSVersion.TLSv1_2
    ciphers: str = ":".join(_OPENSSL_NAMES[n] for n in DEFAULT_CIPHER_SUITES)


def tls_options(min_version: str = "", cipher_suites: Sequence[str] = ()) -> TLSOptions:
    """Options from the kubelet's flag values ("" and () for the defaults)."""
    minimum = ssl.TLSVersion.TLSv1_2
    if min_version:
        if min_version in ("VersionTLS10", "VersionTLS11"):
            raise TLSOptionsError(
                f"--tls-min-version {min_version}: vkpy offers TLS 1.2 and newer only"
            )
        if min_version not in MIN_VERSIONS:
            raise TLSOptionsError(
                f"--tls-min-version {min_version!r}: want one of {', '.join(MIN_VERSIONS)}"
            )
        minimum = MIN_VERSIONS[min_version]
    names = [n.strip() for n in cipher_suites if n.strip()]
    if not names:
        return TLSOptions(minimum=minimum)
    unknown = [n for n in names if n not in _OPENSSL_NAMES and n not in _TLS13_NAMES]
    if unknown:
        raise TLSOptionsError(
            f"--tls-cipher-suites: unknown cipher suite(s) {', '.join(unknown)}; "
            f"for example {', '.join(DEFAULT_CIPHER_SUITES[:2])}"
        )
    chosen = [_OPENSSL_NAMES[n] for n in names if n in _OPENSSL_NAMES]
    if not chosen:
        return TLSOptions(minimum=ssl.TLSVersion.TLSv1_3, ciphers="")
    ciphers = ":".join(dict.fromkeys(chosen))
    try:
        ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER).set_ciphers(ciphers)
    except ssl.SSLError:
        raise TLSOptionsError(
            f"--tls-cipher-suites: this OpenSSL offers none of {', '.join(names)}"
        ) from None
    return TLSOptions(minimum=minimum, ciphers=ciphers)
