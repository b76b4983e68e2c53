"""The SPDY/3 header-compression dictionary, kept apart because it is pure data.

SPDY/3 primes both zlib contexts of a connection with a fixed 1423-byte
dictionary (draft-mbelshe-httpbis-spdy-00, section 2.6.10.1).  Every peer must
use exactly these bytes or the first header block fails with a dictionary
mismatch.  The dictionary is a run of 32-bit length-prefixed lowercase header
names and common values, followed by a blob of concatenated status lines,
dates and media types; it is written down here in that shape so a reader can
check it against the draft, and ``tests/unit/streams/test_spdy.py`` pins its length and
SHA-256.
"""

from __future__ import annotations

__all__ = ["SPDY3_DICTIONARY"]

# Entries encoded as a 4-byte big-endian length followed by the bytes.
_PREFIXED_WORDS: tuple[bytes, ...] = (
    b"options", b"head", b"post", b"put", b"delete", b"trace",
    b"accept", b"accept-charset", b"accept-encoding", b"accept-language",
    b"accept-ranges", b"age", b"allow", b"authorization", b"cache-control",
    b"connection", b"content-base", b"content-encoding", b"content-language",
    b"content-length", b"content-location", b"content-md5", b"content-range",
    b"content-type", b"date", b"etag", b"expect", b"expires", b"from", b"host",
    b"if-match", b"if-modified-since", b"if-none-match", b"if-range",
    b"if-unmodified-since", b"last-modified", b"location", b"max-forwards",
    b"pragma", b"proxy-authenticate", b"proxy-authorization", b"range",
    b"referer", b"retry-after", b"server", b"te", b"trailer",
    b"transfer-encoding", b"upgrade", b"user-agent", b"vary", b"via",
    b"warning", b"www-authenticate", b"method", b"get", b"status", b"200 OK",
    b"version", b"HTTP/1.1", b"url", b"public", b"set-cookie", b"keep-alive",
    b"origin",
)  # fmt: skip

# The unprefixed remainder, concatenated without separators.
_RAW_TAIL: tuple[bytes, ...] = (
    b"100101201202205206300302303304305306307402405406407408409410411412413414415416417502504505",
    b"203 Non-Authoritative Information",
    b"204 No Content",
    b"301 Moved Permanently",
    b"400 Bad Request",
    b"401 Unauthorized",
    b"403 Forbidden",
    b"404 Not Found",
    b"500 Internal Server Error",
    b"501 Not Implemented",
    b"503 Service Unavailable",
    b"Jan Feb Mar Apr May Jun Jul Aug Sept Oct Nov Dec ",
    b"00:00:00 ",
    b"Mon, Tue, Wed, Thu, Fri, Sat, Sun, ",
    b"GMT",
    b"chunked,",
    b"text/html,image/png,image/jpg,image/gif,",
    b"application/xml,application/xhtml+xml,text/plain,text/javascript,",
    b"public",
    b"private",
    b"max-age=",
    b"gzip,deflate,sdch",
    b"charset=utf-8",
    b"charset=iso-8859-1,",
    b"utf-,",
    b"*,",
    b"enq=0.",
)


def _build() -> bytes:
    prefixed = b"".join(len(w).to_bytes(4, "big") + w for w in _PREFIXED_WORDS)
    return prefixed + b"".join(_RAW_TAIL)


SPDY3_DICTIONARY: bytes = _build()
"""The 1423 bytes handed to zlib as ``zdict`` for every SPDY/3 header block."""
