"""What a caller may do on the kubelet API: the kubelet's SubjectAccessReview rules.

Every request is a question about the Node object: verb from the HTTP method (GET
get, POST create, PUT update, PATCH patch, DELETE delete), resource `nodes`, name =
this node, and a subresource from the path: /stats* stats, /metrics* metrics, /logs*
log, /checkpoint* checkpoint, /statusz statusz, /flagz configz, everything else
proxy. As in Kubernetes 1.36 (KubeletFineGrainedAuthz, GA), /pods and /runningpods/
first ask for `pods`, /healthz for `healthz` and /configz for `configz`, then fall
back to `proxy`; one allowed answer is enough. The API server answers through a
SubjectAccessReview; allowed answers are cached 5 minutes, denied ones 30 seconds.
`AlwaysAllow` exists for development only.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

from vkpy.api.auth.authn import ReviewClient, UserInfo
from vkpy.api.auth.ttl_cache import SingleFlight, TtlCache
from vkpy.core import metrics
from vkpy.core.objects import KubeObject
from vkpy.kube.client import ApiError

log = logging.getLogger(__name__)

SAR_PATH = "/apis/authorization.k8s.io/v1/subjectaccessreviews"
_VERBS = {"GET": "get", "POST": "create", "PUT": "update", "PATCH": "patch", "DELETE": "delete"}


@dataclass(frozen=True)
class Attributes:
    """One authorization question about this node."""

    user: UserInfo
    verb: str
    subresource: str
    node: str


def _under(path: str, prefix: str) -> bool:
    prefix = prefix.rstrip("/")
    return path == prefix or path.startswith(prefix + "/")


def subresources(path: str) -> list[str]:
    """The subresources asked for, in order, for a request path."""
    out: list[str] = []
    if _under(path, "/pods") or _under(path, "/runningpods"):
        out.append("pods")
    elif _under(path, "/healthz"):
        out.append("healthz")
    elif _under(path, "/configz"):
        out.append("configz")
    if _under(path, "/stats"):
        out.append("stats")
    elif _under(path, "/metrics"):
        out.append("metrics")
    elif _under(path, "/logs"):
        out.append("log")
    elif _under(path, "/checkpoint"):
        out.append("checkpoint")
    elif _under(path, "/statusz"):
        out.append("statusz")
    elif _under(path, "/flagz"):
        out.append("configz")
    else:
        out.append("proxy")
    return out


def request_attributes(user: UserInfo, method: str, path: str, node: str) -> list[Attributes]:
    verb = _VERBS.get(method.upper(), "")
    return [Attributes(user, verb, sub, node) for sub in subresources(path)]


def forbidden_message(attributes: list[Attributes]) -> str:
    """The kubelet's 403 body (it lists every subresource it tried)."""
    first = attributes[0]
    subs = " ".join(a.subresource for a in attributes)
    return (
        f"Forbidden (user={first.user.name}, verb={first.verb}, resource=nodes, "
        f"subresource(s)=[{subs}])\n"
    )


def error_message(attributes: Attributes) -> str:
    """The kubelet's 500 body when the authorizer could not answer."""
    return (
        f"Authorization error (user={attributes.user.name}, verb={attributes.verb}, "
        f"resource=nodes, subresource={attributes.subresource})"
    )


class AuthorizationError(Exception):
    """The authorizer could not decide (the API server unreachable): answer 500."""

    def __init__(self, attributes: Attributes) -> None:
        super().__init__(error_message(attributes))
        self.attributes = attributes


class Authorizer(Protocol):
    async def allowed(self, attributes: Attributes) -> bool:
        """Whether the request may proceed; AuthorizationError if unknown."""


class AlwaysAllow:
    async def allowed(self, attributes: Attributes) -> bool:
        metrics.KUBELET_API_AUTH.labels("authz", "allowed", "policy").inc()
        return True


def review_body(attributes: Attributes) -> KubeObject:
    user = attributes.user
    spec: KubeObject = {
        "resourceAttributes": {
            "verb": attributes.verb,
            "group": "",
            "version": "v1",
            "resource": "nodes",
            "subresource": attributes.subresource,
            "name": attributes.node,
        },
        "user": user.name,
        "groups": list(user.groups),
    }
    if user.uid:
        spec["uid"] = user.uid
    if user.extra:
        spec["extra"] = {k: list(v) for k, v in user.extra}
    return {
        "apiVersion": "authorization.k8s.io/v1",
        "kind": "SubjectAccessReview",
        "spec": spec,
    }


class WebhookAuthorizer:
    """Asks the API server with SubjectAccessReviews; caches the answers."""

    def __init__(
        self,
        client: ReviewClient,
        allow_ttl: float,
        deny_ttl: float,
        clock: Callable[[], float] | None = None,
    ) -> None:
        self._client = client
        self._allow_ttl = allow_ttl
        self._deny_ttl = deny_ttl
        self._cache: TtlCache[Attributes, bool] = TtlCache(clock=clock) if clock else TtlCache()
        self._reviews: SingleFlight[Attributes, bool] = SingleFlight()

    async def allowed(self, attributes: Attributes) -> bool:
        cached = self._cache.get(attributes)
        if cached is not None:
            metrics.KUBELET_API_AUTH.labels(
                "authz", "allowed" if cached else "denied", "cache"
            ).inc()
            return cached
        try:
            allowed = await self._reviews.run(attributes, lambda: self._review(attributes))
        except ApiError as error:
            metrics.KUBELET_API_AUTH.labels("authz", "error", "review").inc()
            raise AuthorizationError(attributes) from error
        metrics.KUBELET_API_AUTH.labels("authz", "allowed" if allowed else "denied", "review").inc()
        return allowed

    async def _review(self, attributes: Attributes) -> bool:
        """One SubjectAccessReview, shared by the requests that ask it at once."""
        try:
            answer = await self._client.create(SAR_PATH, review_body(attributes))
        except ApiError as error:
            log.error(
                "SubjectAccessReview failed",
                extra={"user": attributes.user.name, "error": str(error)},
            )
            raise
        status = answer.get("status") or {}
        allowed = bool(status.get("allowed")) and not status.get("denied")
        self._cache.put(attributes, allowed, self._allow_ttl if allowed else self._deny_ttl)
        if not allowed:
            log.debug(
                "request denied",
                extra={
                    "user": attributes.user.name,
                    "verb": attributes.verb,
                    "subresource": attributes.subresource,
                    "reason": str(status.get("reason", "")),
                },
            )
        return allowed
