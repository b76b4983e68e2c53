"""Who is calling the kubelet API: client certificates, bearer tokens, anonymous.

The kubelet's rules, in its order: a client certificate that the TLS layer verified
against the client CA names the user (CN) and groups (O); otherwise a bearer token
(the `Authorization` header, or for WebSocket clients the
`base64url.bearer.authorization.k8s.io.<token>` subprotocol) is checked with a
TokenReview; otherwise, only when `--anonymous-auth=true`, the request is
system:anonymous. A token the API server rejects is a 401 even with anonymous access
on. TokenReview answers, positive and negative, are cached (2 minutes by default);
a failed review call is not cached and is a 401.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import logging
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Protocol

from vkpy.api.auth.ttl_cache import SingleFlight, TtlCache
from vkpy.core import metrics
from vkpy.core.objects import KubeObject
from vkpy.kube.client import ApiError

log = logging.getLogger(__name__)

TOKEN_REVIEW_PATH = "/apis/authentication.k8s.io/v1/tokenreviews"  # noqa: S105
WEBSOCKET_TOKEN_PREFIX = "base64url.bearer.authorization.k8s.io."  # noqa: S105
AUTHENTICATED = "system:authenticated"
_RAW_URL_BASE64 = re.compile(r"^[A-Za-z0-9_-]*$")


class ReviewClient(Protocol):
    """The one API-server call reviews need (vkpy.kube.client.KubeClient has it)."""

    async def create(self, path: str, body: KubeObject) -> KubeObject: ...


@dataclass(frozen=True)
class UserInfo:
    name: str
    uid: str = ""
    groups: tuple[str, ...] = ()
    extra: tuple[tuple[str, tuple[str, ...]], ...] = ()
    """Extra attributes, sorted by key (hashable, so it can key the authz cache)."""

    def with_group(self, group: str) -> UserInfo:
        if group in self.groups:
            return self
        return UserInfo(self.name, self.uid, (*self.groups, group), self.extra)


ANONYMOUS = UserInfo("system:anonymous", groups=("system:unauthenticated",))


class AuthenticationError(Exception):
    """The request's credentials are missing or invalid: answer 401."""


PeerCertificate = dict[str, Any]
"""A verified client certificate as `ssl.SSLObject.getpeercert()` decodes it."""


def user_from_certificate(cert: PeerCertificate) -> UserInfo:
    """User CN, groups O, of a client certificate TLS has already verified.

    Read from the standard library's decoding of the certificate (its subject as
    relative distinguished names of (attribute, value) pairs), so the agent does not
    load cryptography's extension (about 10 MiB resident) to authenticate.
    """
    names: list[str] = []
    groups: list[str] = []
    for rdn in cert.get("subject") or ():
        for key, value in rdn:
            if key == "commonName":
                names.append(str(value))
            elif key == "organizationName":
                groups.append(str(value))
    if not names or not names[0]:
        raise AuthenticationError("client certificate without a common name")
    return UserInfo(names[0], groups=tuple(groups))


def bearer_token(headers: Mapping[str, str], websocket_protocols: list[str]) -> str | None:
    """The request's bearer token, if it carries one (AuthenticationError if malformed)."""
    header = headers.get("Authorization", "")
    if header:
        scheme, _, token = header.strip().partition(" ")
        token = token.strip()
        if scheme.lower() == "bearer" and token:
            return token
    found: str | None = None
    for offered in websocket_protocols:
        protocol = offered.strip()
        if not protocol.startswith(WEBSOCKET_TOKEN_PREFIX):
            continue
        if found is not None:
            raise AuthenticationError("multiple base64.bearer.authorization tokens specified")
        encoded = protocol[len(WEBSOCKET_TOKEN_PREFIX) :]
        try:
            if not _RAW_URL_BASE64.match(encoded):
                raise ValueError("not unpadded base64url")
            found = base64.urlsafe_b64decode(encoded + "=" * (-len(encoded) % 4)).decode()
        except (binascii.Error, UnicodeDecodeError, ValueError) as error:
            raise AuthenticationError("invalid base64.bearer.authorization token") from error
    return found


def _user(status: KubeObject) -> UserInfo:
    user = status.get("user") or {}
    extra = user.get("extra") or {}
    return UserInfo(
        name=str(user.get("username", "")),
        uid=str(user.get("uid", "")),
        groups=tuple(str(g) for g in user.get("groups") or ()),
        extra=tuple(sorted((str(k), tuple(str(v) for v in vs or ())) for k, vs in extra.items())),
    )


class TokenReviewer:
    """Checks bearer tokens with TokenReview, caching answers by the token's hash."""

    def __init__(
        self,
        client: ReviewClient,
        ttl: float,
        clock: Callable[[], float] | None = None,
    ) -> None:
        self._client = client
        self._ttl = ttl
        self._cache: TtlCache[bytes, tuple[UserInfo | None]] = (
            TtlCache(clock=clock) if clock else TtlCache()
        )
        self._reviews: SingleFlight[bytes, UserInfo | None] = SingleFlight()

    async def review(self, token: str) -> UserInfo | None:
        """The token's user, or None when the API server says it is not valid."""
        key = hashlib.sha256(token.encode()).digest()
        cached = self._cache.get(key)
        if cached is not None:
            metrics.KUBELET_API_AUTH.labels(
                "authn", "ok" if cached[0] else "rejected", "cache"
            ).inc()
            return cached[0]
        try:
            user = await self._reviews.run(key, lambda: self._review(key, token))
        except ApiError as error:
            metrics.KUBELET_API_AUTH.labels("authn", "error", "review").inc()
            raise AuthenticationError("token review failed") from error
        metrics.KUBELET_API_AUTH.labels("authn", "ok" if user else "rejected", "review").inc()
        return user

    async def _review(self, key: bytes, token: str) -> UserInfo | None:
        """One TokenReview, shared by the requests that ask it at once."""
        body: KubeObject = {
            "apiVersion": "authentication.k8s.io/v1",
            "kind": "TokenReview",
            "spec": {"token": token},
        }
        try:
            answer = await self._client.create(TOKEN_REVIEW_PATH, body)
        except ApiError as error:
            log.error("TokenReview failed", extra={"error": str(error)})
            raise
        status = answer.get("status") or {}
        user = _user(status) if status.get("authenticated") else None
        if user is not None and not user.name:
            user = None
        if user is None and status.get("error"):
            log.debug("token rejected", extra={"error": str(status["error"])})
        self._cache.put(key, (user,), self._ttl)
        return user


class Authenticator:
    """Turns a request's credentials into a user; AuthenticationError means 401."""

    def __init__(self, tokens: TokenReviewer | None, anonymous: bool) -> None:
        self._tokens = tokens
        self._anonymous = anonymous

    async def authenticate(
        self,
        peer_certificate: PeerCertificate | None,
        headers: Mapping[str, str],
        websocket_protocols: list[str],
    ) -> UserInfo:
        if peer_certificate:
            user = user_from_certificate(peer_certificate)
            metrics.KUBELET_API_AUTH.labels("authn", "ok", "cert").inc()
            return user.with_group(AUTHENTICATED)
        token = bearer_token(headers, websocket_protocols)
        if token is not None:
            if self._tokens is None:
                raise AuthenticationError("bearer tokens are not accepted")
            reviewed = await self._tokens.review(token)
            if reviewed is None:
                raise AuthenticationError("invalid bearer token")
            return reviewed.with_group(AUTHENTICATED)
        if self._anonymous:
            metrics.KUBELET_API_AUTH.labels("authn", "ok", "anonymous").inc()
            return ANONYMOUS
        metrics.KUBELET_API_AUTH.labels("authn", "rejected", "anonymous").inc()
        raise AuthenticationError("no credentials")
