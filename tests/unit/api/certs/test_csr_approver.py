"""The serving-CSR approver's judgement: vkpy's own requests are approved; wrong
subjects, requesters, usages and SANs are denied; a request whose node does not show
the address yet waits, then is denied; other signers are left alone."""

from __future__ import annotations

import base64
import datetime
import ipaddress
from typing import Any

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from vkpy.api.certs.csr_approver import Verdict, review
from vkpy.api.certs.x509 import serving_csr

NOW = datetime.datetime(2026, 12, 1, 12, 0, tzinfo=datetime.UTC)
SA = "system:serviceaccount:virtual-kubelet:vkpy"
NODE = {
    "metadata": {"name": "vk-1"},
    "status": {
        "addresses": [
            {"type": "InternalIP", "address": "10.0.0.7"},
            {"type": "Hostname", "address": "vk-1"},
        ]
    },
}


def csr(
    request_pem: bytes,
    username: str = SA,
    groups: tuple[str, ...] = ("system:serviceaccounts",),
    usages: tuple[str, ...] = ("digital signature", "server auth"),
    signer: str = "kubernetes.io/kubelet-serving",
    age: float = 0,
) -> dict[str, Any]:
    created = NOW - datetime.timedelta(seconds=age)
    return {
        "metadata": {"name": "csr-x", "creationTimestamp": created.strftime("%Y-%m-%dT%H:%M:%SZ")},
        "spec": {
            "request": base64.b64encode(request_pem).decode(),
            "signerName": signer,
            "usages": list(usages),
            "username": username,
            "groups": list(groups),
        },
    }


def handmade(names: list[x509.NameAttribute], sans: list[x509.GeneralName]) -> bytes:
    key = ec.generate_private_key(ec.SECP256R1())
    builder = x509.CertificateSigningRequestBuilder().subject_name(x509.Name(names))
    if sans:
        builder = builder.add_extension(x509.SubjectAlternativeName(sans), critical=False)
    return builder.sign(key, hashes.SHA256()).public_bytes(serialization.Encoding.PEM)


def judge(obj: dict[str, Any]) -> Verdict:
    return review(obj, {"vk-1": NODE}.get, [SA], NOW).verdict


def test_vkpy_request_from_the_allowed_service_account_is_approved() -> None:
    pem, _ = serving_csr("vk-1", ["10.0.0.7", "vk-1"])
    assert judge(csr(pem)) is Verdict.APPROVE


def test_request_by_the_node_itself_is_approved() -> None:
    pem, _ = serving_csr("vk-1", ["10.0.0.7"])
    assert judge(csr(pem, username="system:node:vk-1", groups=("system:nodes",))) is Verdict.APPROVE


def test_other_requesters_are_denied() -> None:
    pem, _ = serving_csr("vk-1", ["10.0.0.7"])
    assert judge(csr(pem, username="system:serviceaccount:default:default")) is Verdict.DENY
    # another node may not ask for vk-1's certificate
    other = csr(pem, username="system:node:vk-2", groups=("system:nodes",))
    assert judge(other) is Verdict.DENY


def test_sans_beyond_the_node_addresses_wait_then_are_denied() -> None:
    pem, _ = serving_csr("vk-1", ["10.0.0.7", "kubernetes.default.svc"])
    decision = review(csr(pem), {"vk-1": NODE}.get, [SA], NOW)
    assert decision.verdict is Verdict.WAIT
    assert "kubernetes.default.svc" in decision.reason
    assert judge(csr(pem, age=120)) is Verdict.DENY


def test_unknown_node_waits_then_is_denied() -> None:
    pem, _ = serving_csr("vk-9", ["10.0.0.7"])
    assert judge(csr(pem)) is Verdict.WAIT
    assert judge(csr(pem, age=61)) is Verdict.DENY


def test_client_usages_and_wrong_subjects_are_denied() -> None:
    pem, _ = serving_csr("vk-1", ["10.0.0.7"])
    assert judge(csr(pem, usages=("digital signature", "client auth"))) is Verdict.DENY
    no_org = handmade(
        [x509.NameAttribute(NameOID.COMMON_NAME, "system:node:vk-1")],
        [x509.IPAddress(ipaddress.ip_address("10.0.0.7"))],
    )
    assert judge(csr(no_org)) is Verdict.DENY
    admin = handmade(
        [
            x509.NameAttribute(NameOID.ORGANIZATION_NAME, "system:masters"),
            x509.NameAttribute(NameOID.COMMON_NAME, "admin"),
        ],
        [x509.DNSName("vk-1")],
    )
    assert judge(csr(admin)) is Verdict.DENY


def test_email_and_uri_sans_are_denied() -> None:
    names = [
        x509.NameAttribute(NameOID.ORGANIZATION_NAME, "system:nodes"),
        x509.NameAttribute(NameOID.COMMON_NAME, "system:node:vk-1"),
    ]
    email = handmade(names, [x509.DNSName("vk-1"), x509.RFC822Name("a@example.com")])
    uri = handmade(names, [x509.DNSName("vk-1"), x509.UniformResourceIdentifier("spiffe://x")])
    assert judge(csr(email)) is Verdict.DENY
    assert judge(csr(uri)) is Verdict.DENY
    assert judge(csr(handmade(names, []))) is Verdict.DENY


def test_other_signers_and_decided_requests_are_left_alone() -> None:
    pem, _ = serving_csr("vk-1", ["10.0.0.7"])
    assert judge(csr(pem, signer="kubernetes.io/kube-apiserver-client")) is Verdict.IGNORE
    done = csr(pem)
    done["status"] = {"conditions": [{"type": "Approved", "status": "True"}]}
    assert judge(done) is Verdict.IGNORE
