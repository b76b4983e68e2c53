"""An opt-in approver for vkpy's serving-certificate requests, and nothing else.

kube-controller-manager signs `kubernetes.io/kubelet-serving` CSRs but never approves
them, so a vkpy installed with `servingCert.mode=csr` waits until someone does. This
approver does it for exactly the requests vkpy makes, checked one by one:

- signer `kubernetes.io/kubelet-serving` (any other signer is left alone, for others);
- subject exactly O=system:nodes, CN=system:node:<node>, and the CSR's signature valid;
- requested by that node's own identity (user system:node:<node> in system:nodes), or
  by one of the `allowed_requesters` (the chart's ServiceAccount, which runs the node);
- a Node <node> exists, and every SAN is one of its own `status.addresses`;
- DNS and IP SANs only (no email, no URI), at least one of them;
- usages within digital signature, key encipherment, server auth, including server auth.

A request that passes is approved; one that fails a check of who or what is denied
with the reason. One whose node does not exist yet or whose SANs are not (yet) the
node's addresses waits, since vkpy may ask before its Node shows its new address (a
failover), and is denied only once it is older than `settle_seconds`.
"""

from __future__ import annotations

import asyncio
import base64
import datetime
import ipaddress
import logging
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from enum import Enum

from cryptography import x509
from cryptography.x509.oid import NameOID

from vkpy.api.certs.x509 import NODE_USER_PREFIX, NODES_GROUP
from vkpy.core.objects import KubeObject, conditions_of, meta, name_of, spec, status
from vkpy.core.rfc3339 import format_time, parse_or_none
from vkpy.kube.client import ApiError, KubeClient

log = logging.getLogger(__name__)

CSR_PATH = "/apis/certificates.k8s.io/v1/certificatesigningrequests"
SIGNER = "kubernetes.io/kubelet-serving"
ALLOWED_USAGES = frozenset({"digital signature", "key encipherment", "server auth"})
REASON = "VkpyServingApprover"


class Verdict(Enum):
    APPROVE = "approve"
    DENY = "deny"
    WAIT = "wait"
    IGNORE = "ignore"


@dataclass(frozen=True)
class Decision:
    verdict: Verdict
    reason: str


def _decided(csr: KubeObject) -> bool:
    return any(c.get("type") in ("Approved", "Denied") for c in conditions_of(csr))


def _node_addresses(node: KubeObject) -> set[str]:
    out = set()
    for entry in status(node).get("addresses") or ():
        address = str(entry.get("address") or "")
        try:
            out.add(str(ipaddress.ip_address(address)))
        except ValueError:
            out.add(address.lower())
    return out


def _subject(request: x509.CertificateSigningRequest) -> tuple[list[str], list[str], int]:
    names = request.subject
    common = [str(a.value) for a in names.get_attributes_for_oid(NameOID.COMMON_NAME)]
    orgs = [str(a.value) for a in names.get_attributes_for_oid(NameOID.ORGANIZATION_NAME)]
    return common, orgs, len(list(names))


def review(
    csr: KubeObject,
    node_for: Callable[[str], KubeObject | None],
    allowed_requesters: Iterable[str],
    now: datetime.datetime,
    settle_seconds: float = 60.0,
) -> Decision:
    """What to do with one CSR (pure: the Node comes from `node_for`)."""
    body = spec(csr)
    if body.get("signerName") != SIGNER:
        return Decision(Verdict.IGNORE, "not a kubelet-serving request")
    if _decided(csr):
        return Decision(Verdict.IGNORE, "already decided")
    try:
        request = x509.load_pem_x509_csr(base64.b64decode(str(body.get("request") or "")))
    except ValueError as error:
        return Decision(Verdict.DENY, f"the request is not a PEM CSR: {error}")
    if not request.is_signature_valid:
        return Decision(Verdict.DENY, "the request's signature is not valid")
    common, orgs, count = _subject(request)
    if len(common) != 1 or orgs != [NODES_GROUP] or count != 2:
        return Decision(
            Verdict.DENY, f"subject must be exactly O={NODES_GROUP}, CN=system:node:<node>"
        )
    if not common[0].startswith(NODE_USER_PREFIX) or common[0] == NODE_USER_PREFIX:
        return Decision(Verdict.DENY, f"CN {common[0]!r} is not a node identity")
    node_name = common[0].removeprefix(NODE_USER_PREFIX)
    requester = str(body.get("username") or "")
    own = requester == common[0] and NODES_GROUP in (body.get("groups") or ())
    if not own and requester not in set(allowed_requesters):
        return Decision(
            Verdict.DENY, f"{requester!r} may not request a certificate for {common[0]}"
        )
    usages = set(body.get("usages") or ())
    if not usages <= ALLOWED_USAGES or "server auth" not in usages:
        return Decision(
            Verdict.DENY, f"usages {sorted(usages)} are not those of a serving certificate"
        )
    try:
        sans = request.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    except x509.ExtensionNotFound:
        return Decision(Verdict.DENY, "no subject alternative names")
    if any(not isinstance(n, (x509.DNSName, x509.IPAddress)) for n in sans):
        return Decision(Verdict.DENY, "only DNS and IP subject alternative names are allowed")
    wanted = {name.lower() for name in sans.get_values_for_type(x509.DNSName)}
    wanted |= {str(ip) for ip in sans.get_values_for_type(x509.IPAddress)}
    if not wanted:
        return Decision(Verdict.DENY, "no DNS or IP subject alternative names")
    created = parse_or_none(meta(csr).get("creationTimestamp")) or now
    waited = (now - created).total_seconds()
    node = node_for(node_name)
    if node is None:
        problem = f"node {node_name} does not exist"
    else:
        extra = wanted - _node_addresses(node)
        if not extra:
            return Decision(Verdict.APPROVE, f"serving certificate for node {node_name}")
        problem = f"{', '.join(sorted(extra))} not among node {node_name}'s addresses"
    if waited >= settle_seconds:
        return Decision(Verdict.DENY, problem)
    return Decision(Verdict.WAIT, problem)


def condition(decision: Decision, now: datetime.datetime) -> KubeObject:
    kind = "Approved" if decision.verdict is Verdict.APPROVE else "Denied"
    stamp = format_time(now)
    return {
        "type": kind,
        "status": "True",
        "reason": REASON,
        "message": decision.reason,
        "lastUpdateTime": stamp,
        "lastTransitionTime": stamp,
    }


class CsrApprover:
    """Reviews pending kubelet-serving CSRs every `interval` seconds; `run` forever."""

    def __init__(
        self,
        client: KubeClient,
        allowed_requesters: Iterable[str],
        *,
        interval: float = 2.0,
        settle_seconds: float = 60.0,
        clock: Callable[[], datetime.datetime] = lambda: datetime.datetime.now(datetime.UTC),
    ) -> None:
        self._client = client
        self._allowed = frozenset(allowed_requesters)
        self._interval = interval
        self._settle = settle_seconds
        self._clock = clock
        self._waiting: dict[str, str] = {}
        self.decided: dict[str, Decision] = {}

    async def run(self) -> None:
        while True:
            try:
                await self.review_once()
            except ApiError as error:
                log.warning("cannot review CSRs", extra={"error": str(error)})
            await asyncio.sleep(self._interval)

    async def review_once(self) -> None:
        listed = await self._client.get(CSR_PATH, {"fieldSelector": f"spec.signerName={SIGNER}"})
        nodes: dict[str, KubeObject | None] = {}

        def node_for(name: str) -> KubeObject | None:
            return nodes.get(name)

        for csr in listed.get("items") or ():
            if _decided(csr):
                continue
            node_name = _claimed_node(csr)
            if node_name and node_name not in nodes:
                nodes[node_name] = await self._node(node_name)
            decision = review(csr, node_for, self._allowed, self._clock(), self._settle)
            await self._act(csr, decision)

    async def _node(self, name: str) -> KubeObject | None:
        try:
            return await self._client.get(f"/api/v1/nodes/{name}")
        except ApiError as error:
            if error.not_found:
                return None
            raise

    async def _act(self, csr: KubeObject, decision: Decision) -> None:
        name = name_of(csr)
        if decision.verdict is Verdict.IGNORE:
            return
        if decision.verdict is Verdict.WAIT:
            if self._waiting.get(name) != decision.reason:
                log.info("CSR waits", extra={"csr": name, "reason": decision.reason})
                self._waiting[name] = decision.reason
            return
        self._waiting.pop(name, None)
        updated = dict(csr)
        updated["status"] = {
            **status(csr),
            "conditions": [
                *conditions_of(csr),
                condition(decision, self._clock()),
            ],
        }
        try:
            await self._client.replace(f"{CSR_PATH}/{name}/approval", updated)
        except ApiError as error:
            if error.conflict or error.not_found:
                return  # changed or gone meanwhile: seen again at the next pass
            raise
        self.decided[name] = decision
        log.info(
            "CSR approved" if decision.verdict is Verdict.APPROVE else "CSR denied",
            extra={"csr": name, "reason": decision.reason, "requester": spec(csr).get("username")},
        )


def _claimed_node(csr: KubeObject) -> str | None:
    """The node a CSR names in its CN, without judging it (for fetching the Node once)."""
    try:
        request = x509.load_pem_x509_csr(base64.b64decode(str(spec(csr).get("request") or "")))
    except ValueError:
        return None
    common, _, _ = _subject(request)
    if len(common) == 1 and common[0].startswith(NODE_USER_PREFIX):
        return common[0].removeprefix(NODE_USER_PREFIX) or None
    return None
