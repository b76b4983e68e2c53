"""Authentication and authorization rules of the kubelet API, with a recording fake
API server (the real one is exercised by tests/integration/test_kubelet_api.py)."""

from __future__ import annotations

import asyncio
import base64
import ssl
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web

from tests.unit.tls_site import serving
from vkpy.api.auth.authn import (
    ANONYMOUS,
    TOKEN_REVIEW_PATH,
    AuthenticationError,
    Authenticator,
    TokenReviewer,
    UserInfo,
    bearer_token,
    user_from_certificate,
)
from vkpy.api.auth.authz import (
    SAR_PATH,
    AlwaysAllow,
    Attributes,
    AuthorizationError,
    WebhookAuthorizer,
    forbidden_message,
    request_attributes,
    subresources,
)
from vkpy.api.auth.middleware import peer_certificate
from vkpy.api.auth.ttl_cache import TtlCache
from vkpy.api.certs.tls import ServingTLS
from vkpy.api.certs.x509 import self_signed
from vkpy.devcluster import CertificateAuthority
from vkpy.kube.client import ApiError


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


class FakeApi:
    """Answers reviews from a function; records what was asked."""

    def __init__(self, answer: Any) -> None:
        self.answer = answer
        self.calls: list[tuple[str, dict[str, Any]]] = []

    async def create(self, path: str, body: dict[str, Any]) -> dict[str, Any]:
        self.calls.append((path, body))
        result = self.answer(body)
        if isinstance(result, Exception):
            raise result
        return {**body, "status": result}


@pytest.mark.parametrize(
    ("path", "expected"),
    [
        ("/stats/summary", ["stats"]),
        ("/stats", ["stats"]),
        ("/metrics", ["metrics"]),
        ("/metrics/resource", ["metrics"]),
        ("/logs/", ["log"]),
        ("/containerLogs/ns/pod/c", ["proxy"]),
        ("/exec/ns/pod/c", ["proxy"]),
        ("/portForward/ns/pod", ["proxy"]),
        ("/pods", ["pods", "proxy"]),
        ("/runningpods/", ["pods", "proxy"]),
        ("/healthz", ["healthz", "proxy"]),
        ("/configz", ["configz", "proxy"]),
        # Kubernetes 1.36's node authorizer: the z-pages have their own subresources
        # and no fallback to proxy (/flagz is read with configz).
        ("/statusz", ["statusz"]),
        ("/statusz/", ["statusz"]),
        ("/flagz", ["configz"]),
        ("/flagz/", ["configz"]),
        ("/statuszx", ["proxy"]),
        ("/statsx", ["proxy"]),
        ("/podsx", ["proxy"]),
    ],
)
def test_subresources_follow_the_kubelet(path: str, expected: list[str]) -> None:
    assert subresources(path) == expected


def test_verbs_from_methods_and_forbidden_body() -> None:
    user = UserInfo("alice")
    verbs = [
        request_attributes(user, m, "/pods", "n")[0].verb
        for m in ("GET", "POST", "PUT", "PATCH", "DELETE", "HEAD")
    ]
    assert verbs == ["get", "create", "update", "patch", "delete", ""]
    attributes = request_attributes(user, "GET", "/pods", "node-1")
    assert forbidden_message(attributes) == (
        "Forbidden (user=alice, verb=get, resource=nodes, subresource(s)=[pods proxy])\n"
    )


def test_bearer_tokens_from_header_or_websocket_protocol() -> None:
    assert bearer_token({"Authorization": "Bearer abc"}, []) == "abc"
    assert bearer_token({"Authorization": "bearer  abc "}, []) == "abc"
    assert bearer_token({"Authorization": "Basic abc"}, []) is None
    assert bearer_token({"Authorization": "Bearer "}, []) is None
    encoded = base64.urlsafe_b64encode(b"tok-en").decode().rstrip("=")
    protocols = ["v5.channel.k8s.io", f"base64url.bearer.authorization.k8s.io.{encoded}"]
    assert bearer_token({}, protocols) == "tok-en"
    with pytest.raises(AuthenticationError):
        bearer_token({}, ["base64url.bearer.authorization.k8s.io.%%%"])
    with pytest.raises(AuthenticationError):
        bearer_token({}, [protocols[1], protocols[1]])


async def test_client_certificate_names_user_and_groups(tmp_path: Path) -> None:
    """Through a real TLS handshake: the user is read from what ssl verified."""
    ca = CertificateAuthority.create("test-ca")
    cert_pem, key_pem = ca.issue("bob", organizations=["devs", "ops"], client=True)
    (tmp_path / "bob.crt").write_bytes(cert_pem)
    (tmp_path / "bob.key").write_bytes(key_pem)
    tls = ServingTLS(verify_client=True)
    tls.serve(self_signed("n", ["127.0.0.1"]))
    tls.trust_clients(ca.cert_pem)
    seen: list[UserInfo] = []

    async def who(request: web.Request) -> web.Response:
        cert = peer_certificate(request)
        assert cert is not None
        seen.append(user_from_certificate(cert))
        return web.Response(text="ok")

    async with serving(tls.context, who) as port:
        ctx = ssl.create_default_context()
        ctx.check_hostname, ctx.verify_mode = False, ssl.CERT_NONE
        ctx.load_cert_chain(tmp_path / "bob.crt", tmp_path / "bob.key")
        reader, writer = await asyncio.open_connection("127.0.0.1", port, ssl=ctx)
        writer.write(b"GET / HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        assert (await reader.read()).startswith(b"HTTP/1.1 200")
        writer.close()
    assert seen == [UserInfo("bob", groups=("devs", "ops"))]


def test_a_client_certificate_without_a_common_name_is_refused() -> None:
    subject = ((("organizationName", "devs"),),)
    with pytest.raises(AuthenticationError):
        user_from_certificate({"subject": subject})


async def test_token_reviews_are_cached_both_ways_for_the_ttl() -> None:
    clock = Clock()
    api = FakeApi(
        lambda body: {
            "authenticated": body["spec"]["token"] == "good",
            "user": {"username": "sa", "uid": "u1", "groups": ["g"], "extra": {"k": ["v"]}},
        }
    )
    reviewer = TokenReviewer(api, ttl=120, clock=clock)
    authn = Authenticator(reviewer, anonymous=False)
    user = await authn.authenticate(None, {"Authorization": "Bearer good"}, [])
    assert user == UserInfo("sa", "u1", ("g", "system:authenticated"), (("k", ("v",)),))
    for _ in range(3):
        await authn.authenticate(None, {"Authorization": "Bearer good"}, [])
        with pytest.raises(AuthenticationError):
            await authn.authenticate(None, {"Authorization": "Bearer bad"}, [])
    assert [c[0] for c in api.calls] == [TOKEN_REVIEW_PATH, TOKEN_REVIEW_PATH]
    clock.now += 121
    await authn.authenticate(None, {"Authorization": "Bearer good"}, [])
    assert len(api.calls) == 3


async def test_review_failure_is_401_and_not_cached() -> None:
    failing = FakeApi(lambda body: ApiError(0, "Unreachable", "down"))
    authn = Authenticator(TokenReviewer(failing, ttl=120), anonymous=True)
    for _ in range(2):
        with pytest.raises(AuthenticationError):
            await authn.authenticate(None, {"Authorization": "Bearer x"}, [])
    assert len(failing.calls) == 2


async def test_anonymous_only_when_enabled_and_never_for_bad_tokens() -> None:
    api = FakeApi(lambda body: {"authenticated": False, "error": "invalid"})
    with pytest.raises(AuthenticationError):
        await Authenticator(TokenReviewer(api, 1), anonymous=False).authenticate(None, {}, [])
    anonymous = Authenticator(TokenReviewer(api, 1), anonymous=True)
    assert await anonymous.authenticate(None, {}, []) == ANONYMOUS
    with pytest.raises(AuthenticationError):
        await anonymous.authenticate(None, {"Authorization": "Bearer nope"}, [])


async def test_subject_access_reviews_cache_allow_5_min_and_deny_30_s() -> None:
    clock = Clock()
    allowed_subresources = {"stats"}
    api = FakeApi(
        lambda body: {
            "allowed": body["spec"]["resourceAttributes"]["subresource"] in allowed_subresources
        }
    )
    authz = WebhookAuthorizer(api, allow_ttl=300, deny_ttl=30, clock=clock)
    user = UserInfo("sa", "uid-1", ("g1",), (("scopes", ("a", "b")),))
    stats = Attributes(user, "get", "stats", "node-1")
    proxy = Attributes(user, "get", "proxy", "node-1")
    assert await authz.allowed(stats) is True
    assert await authz.allowed(proxy) is False
    body = api.calls[0][1]
    assert api.calls[0][0] == SAR_PATH
    assert body["spec"] == {
        "resourceAttributes": {
            "verb": "get",
            "group": "",
            "version": "v1",
            "resource": "nodes",
            "subresource": "stats",
            "name": "node-1",
        },
        "user": "sa",
        "groups": ["g1"],
        "uid": "uid-1",
        "extra": {"scopes": ["a", "b"]},
    }
    allowed_subresources.add("proxy")
    clock.now += 29
    assert await authz.allowed(proxy) is False  # denial still cached
    clock.now += 2
    assert await authz.allowed(proxy) is True  # denial expired after 30 s
    assert len(api.calls) == 3
    allowed_subresources.clear()
    clock.now += 250
    assert await authz.allowed(stats) is True  # allowed answer cached for 5 min
    clock.now += 60
    assert await authz.allowed(stats) is False
    assert len(api.calls) == 4


async def test_authorizer_errors_and_always_allow() -> None:
    failing = FakeApi(lambda body: ApiError(503, "", "down"))
    authz = WebhookAuthorizer(failing, 300, 30)
    with pytest.raises(AuthorizationError) as caught:
        await authz.allowed(Attributes(UserInfo("u"), "get", "proxy", "n"))
    assert str(caught.value) == (
        "Authorization error (user=u, verb=get, resource=nodes, subresource=proxy)"
    )
    assert await AlwaysAllow().allowed(Attributes(UserInfo("u"), "get", "proxy", "n"))


def test_ttl_cache_expires_and_evicts_least_recently_used() -> None:
    clock = Clock()
    cache: TtlCache[str, int] = TtlCache(max_size=2, clock=clock)
    cache.put("a", 1, ttl=10)
    cache.put("b", 2, ttl=100)
    assert cache.get("a") == 1
    cache.put("c", 3, ttl=100)  # evicts b, the least recently used
    assert cache.get("b") is None
    clock.now += 11
    assert cache.get("a") is None
    assert cache.get("c") == 3
    cache.put("d", 4, ttl=0)
    assert cache.get("d") is None


class GatedApi(FakeApi):
    """A FakeApi whose answers wait until `gate` is set, so requests pile up."""

    def __init__(self, answer: Any) -> None:
        super().__init__(answer)
        self.gate = asyncio.Event()

    async def create(self, path: str, body: dict[str, Any]) -> dict[str, Any]:
        self.calls.append((path, body))
        await self.gate.wait()
        result = self.answer(body)
        if isinstance(result, Exception):
            raise result
        return {**body, "status": result}


async def test_a_burst_of_one_callers_requests_asks_the_api_server_once() -> None:
    # Twenty `kubectl exec` at once reach the kubelet API as twenty requests of the
    # API server's one client: one SubjectAccessReview and one TokenReview answer all.
    sar = GatedApi(lambda body: {"allowed": True})
    authz = WebhookAuthorizer(sar, 300, 30)
    proxy = Attributes(UserInfo("apiserver"), "create", "proxy", "n")
    tokens = GatedApi(lambda body: {"authenticated": True, "user": {"username": "sa"}})
    reviewer = TokenReviewer(tokens, ttl=120)
    asked = [asyncio.ensure_future(authz.allowed(proxy)) for _ in range(20)]
    asked += [asyncio.ensure_future(reviewer.review("t")) for _ in range(20)]
    await asyncio.sleep(0)
    asked[0].cancel()  # one caller going away ends nobody else's answer
    sar.gate.set()
    tokens.gate.set()
    answers = await asyncio.gather(*asked[1:])
    assert answers[:19] == [True] * 19
    assert {user.name for user in answers[19:]} == {"sa"}
    assert len(sar.calls) == 1
    assert len(tokens.calls) == 1


async def test_a_failed_review_fails_every_request_waiting_on_it_and_is_not_kept() -> None:
    failing = GatedApi(lambda body: ApiError(503, "", "down"))
    authz = WebhookAuthorizer(failing, 300, 30)
    proxy = Attributes(UserInfo("u"), "get", "proxy", "n")
    asked = [asyncio.ensure_future(authz.allowed(proxy)) for _ in range(3)]
    await asyncio.sleep(0)
    failing.gate.set()
    results = await asyncio.gather(*asked, return_exceptions=True)
    assert all(isinstance(result, AuthorizationError) for result in results)
    assert len(failing.calls) == 1
    failing.answer = lambda body: {"allowed": True}
    assert await authz.allowed(proxy) is True  # asked again: the failure was not cached
    assert len(failing.calls) == 2
