"""vkpy's serving certificate as an API server that verifies kubelets sees it.

A second control plane runs with `--kubelet-certificate-authority` (the kubelet
signing CA), so `kubectl logs` only works when vkpy serves a certificate that CA
issued: through a CSR approved and signed by the real controller-manager
(`--rotate-server-certificates`), or from files (`--tls-cert-file`). The
self-signed development certificate is refused there. Renewal is shown against the
same real signer in-process, with the clock moved forward instead of waiting.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import datetime
import ipaddress
import json
import secrets
import socket
import ssl
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web
from cryptography import x509
from cryptography.x509.oid import NameOID
from cryptography.x509.verification import PolicyBuilder, Store

from tests.integration.agent import Agent, Kube, sim_pod, wait_for
from vkpy.api.csr import CURRENT, CertificateRotator
from vkpy.api.tls import ServingTLS
from vkpy.devcluster import CertificateAuthority, DevCluster
from vkpy.kube.client import ClientOptions, KubeClient


@pytest.fixture(scope="module")
def verifying(tmp_path_factory: pytest.TempPathFactory) -> Iterator[DevCluster]:
    dev = DevCluster(tmp_path_factory.mktemp("verifying"), verify_kubelet_certs=True)
    dev.up()
    try:
        yield dev
    finally:
        dev.down()


@pytest.fixture
def kube(verifying: DevCluster) -> Iterator[Kube]:
    access = verifying.access()
    name = f"vkpy-t-{secrets.token_hex(4)}"
    access.run_kubectl("create", "namespace", name)
    wait_for(
        "default ServiceAccount",
        lambda: access.run_kubectl("get", "sa", "default", "-n", name, check=False).returncode == 0,
    )
    try:
        yield Kube(access, name)
    finally:
        access.run_kubectl("delete", "namespace", name, "--wait=false", check=False)


@pytest.fixture
def agents(verifying: DevCluster, tmp_path: Path) -> Iterator[list[Agent]]:
    started: list[Agent] = []
    yield started
    for agent in started:
        agent.stop()
        verifying.access().run_kubectl(
            "delete", "node", agent.node_name, "--wait=false", check=False
        )
        print(f"--- log of {agent.node_name} ---\n{agent.logs()[-20000:]}")


def start(verifying: DevCluster, tmp_path: Path, agents: list[Agent], *args: str) -> Agent:
    name = f"vk-{secrets.token_hex(3)}"
    agent = Agent(
        cluster=verifying.access(),
        node_name=name,
        state_dir=tmp_path / name / "state",
        log_path=tmp_path / f"{name}.log",
        extra_args=list(args),
    )
    agents.append(agent.start())
    return agent


def served_certificate(port: int) -> x509.Certificate | None:
    """The certificate vkpy presents now, or None when the handshake is refused."""
    ctx = ssl.create_default_context()
    ctx.check_hostname, ctx.verify_mode = False, ssl.CERT_NONE
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=5) as raw:
            with ctx.wrap_socket(raw) as tls:
                der = tls.getpeercert(binary_form=True)
    except (OSError, ssl.SSLError):
        return None
    return x509.load_der_x509_certificate(der) if der else None


def issued_by_kubelet_ca(cert: x509.Certificate, verifying: DevCluster) -> bool:
    ca = x509.load_pem_x509_certificate(verifying.kubelet_ca_cert.read_bytes())
    verifier = (
        PolicyBuilder()
        .store(Store([ca]))
        .build_server_verifier(x509.IPAddress(ipaddress.ip_address("127.0.0.1")))
    )
    try:
        verifier.verify(cert, [])
    except Exception:
        return False
    return True


def node_events(kube: Kube, node: str, reason: str) -> list[dict[str, Any]]:
    out = kube.kubectl(
        "get", "events", "-A", "-o", "json",
        f"--field-selector=involvedObject.kind=Node,involvedObject.name={node},reason={reason}",
    )  # fmt: skip
    items: list[dict[str, Any]] = json.loads(out)["items"]
    return items


def logs_reach_vkpy(kube: Kube, node: str) -> str:
    kube.create(sim_pod("web", node))
    wait_for("Running", lambda: kube.phase("web") == "Running")
    result = kube.cluster.run_kubectl("logs", "-n", kube.namespace, "web", "--tail=1", check=False)
    return result.stdout if result.returncode == 0 else "ERROR " + result.stderr


def test_csr_bootstrap_then_the_verifying_api_server_reaches_vkpy(
    verifying: DevCluster, kube: Kube, agents: list[Agent], tmp_path: Path
) -> None:
    agent = start(verifying, tmp_path, agents, "--rotate-server-certificates")
    pending = wait_for(
        "an Event naming the CSR to approve",
        lambda: node_events(kube, agent.node_name, "ServingCertificatePending"),
        timeout=30,
    )
    message = pending[0]["message"]
    csr_name = message.split("kubectl certificate approve ")[1].rstrip(")")
    assert served_certificate(agent.port) is None  # no certificate yet: refused
    assert agent.alive()

    csr = json.loads(kube.kubectl("get", "csr", csr_name, "-o", "json"))
    spec = csr["spec"]
    assert spec["signerName"] == "kubernetes.io/kubelet-serving"
    assert spec["usages"] == ["digital signature", "server auth"]
    request = x509.load_pem_x509_csr(base64.b64decode(spec["request"]))
    assert request.subject.get_attributes_for_oid(NameOID.COMMON_NAME)[0].value == (
        f"system:node:{agent.node_name}"
    )
    assert request.subject.get_attributes_for_oid(NameOID.ORGANIZATION_NAME)[0].value == (
        "system:nodes"
    )
    san = request.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert [str(ip) for ip in san.get_values_for_type(x509.IPAddress)] == ["127.0.0.1"]
    assert san.get_values_for_type(x509.DNSName) == [agent.node_name]

    kube.kubectl("certificate", "approve", csr_name)
    cert = wait_for("the issued certificate served", lambda: served_certificate(agent.port))
    assert issued_by_kubelet_ca(cert, verifying)
    assert cert.subject.get_attributes_for_oid(NameOID.COMMON_NAME)[0].value == (
        f"system:node:{agent.node_name}"
    )
    assert (agent.state_dir / "certs" / CURRENT).is_file()
    wait_for(
        "ServingCertificateIssued Event",
        lambda: node_events(kube, agent.node_name, "ServingCertificateIssued"),
    )
    assert logs_reach_vkpy(kube, agent.node_name).startswith("line ")

    agent.stop()  # a restart reuses the stored certificate: no new CSR
    before = len(json.loads(kube.kubectl("get", "csr", "-o", "json"))["items"])
    agent.start()
    again = wait_for("served after restart", lambda: served_certificate(agent.port))
    assert again == cert
    assert len(json.loads(kube.kubectl("get", "csr", "-o", "json"))["items"]) == before


def test_a_self_signed_certificate_is_refused_by_a_verifying_api_server(
    verifying: DevCluster, kube: Kube, agents: list[Agent], tmp_path: Path
) -> None:
    agent = start(verifying, tmp_path, agents)
    answer = logs_reach_vkpy(kube, agent.node_name)
    assert answer.startswith("ERROR ")
    assert "certificate" in answer and ("x509" in answer or "tls" in answer), answer


def test_certificate_files_are_served_and_reloaded(
    verifying: DevCluster, kube: Kube, agents: list[Agent], tmp_path: Path
) -> None:
    ca = CertificateAuthority.load(verifying.kubelet_ca_cert, verifying.kubelet_ca_key)
    cert_file, key_file = tmp_path / "serving.crt", tmp_path / "serving.key"

    def write(common_name: str) -> None:
        cert, key = ca.issue(common_name, ip_addresses=["127.0.0.1"], server=True)
        key_file.write_bytes(key)
        cert_file.write_bytes(cert)

    write("first")
    agent = start(
        verifying,
        tmp_path,
        agents,
        f"--tls-cert-file={cert_file}",
        f"--tls-private-key-file={key_file}",
    )
    assert logs_reach_vkpy(kube, agent.node_name).startswith("line ")
    first = served_certificate(agent.port)
    assert first is not None and first.subject.rfc4514_string() == "CN=first"
    write("second")
    second = wait_for(
        "the new certificate served",
        lambda: (
            (c := served_certificate(agent.port))
            and c.subject.rfc4514_string() == "CN=second"
            and c
        ),
        timeout=30,
    )
    assert issued_by_kubelet_ca(second, verifying)
    assert agent.alive()


# --- renewal against the real signer, in-process, on a clock that can jump ---------------


class Events:
    def __init__(self) -> None:
        self.reasons: list[str] = []

    def emit(self, involved: Any, event_type: str, reason: str, message: str) -> None:
        self.reasons.append(reason)


async def approve_csrs_for(kube: Kube, node: str, stop: asyncio.Event) -> None:
    """Approve every pending CSR of this node, like an approver controller would."""
    while not stop.is_set():
        raw = await asyncio.to_thread(kube.kubectl, "get", "csr", "-o", "json")
        for item in json.loads(raw)["items"]:
            if item.get("status", {}).get("conditions"):
                continue
            request = x509.load_pem_x509_csr(base64.b64decode(item["spec"]["request"]))
            name = request.subject.get_attributes_for_oid(NameOID.COMMON_NAME)[0].value
            if name == f"system:node:{node}":
                await asyncio.to_thread(
                    kube.kubectl, "certificate", "approve", item["metadata"]["name"]
                )
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(stop.wait(), 0.5)


@contextlib.asynccontextmanager
async def https_site(tls: ServingTLS) -> AsyncIterator[int]:
    async def ok(_: web.Request) -> web.Response:
        return web.Response(text="ok")

    app = web.Application()
    app.router.add_get("/", ok)
    runner = web.AppRunner(app)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", 0, ssl_context=tls.context).start()
    try:
        yield int(runner.addresses[0][1])
    finally:
        await runner.cleanup()


async def test_renewal_by_the_real_signer_without_a_restart(
    verifying: DevCluster, kube: Kube, tmp_path: Path
) -> None:
    node = f"vk-{secrets.token_hex(3)}"
    jumped = datetime.timedelta()

    def clock() -> datetime.datetime:
        return datetime.datetime.now(datetime.UTC) + jumped

    async def sleep(seconds: float) -> None:
        nonlocal jumped
        if seconds > 5:  # waiting for the renewal time: jump there instead
            jumped += datetime.timedelta(seconds=seconds)
            await asyncio.sleep(0)
        else:
            await asyncio.sleep(seconds)

    client = await KubeClient.connect(ClientOptions(kubeconfig=str(verifying.kubeconfig)))
    tls, events, stop = ServingTLS(verify_client=False), Events(), asyncio.Event()
    rotator = CertificateRotator(
        client, tls, events, node, ["127.0.0.1"], tmp_path,
        clock=clock, sleep=sleep, expiration_seconds=600,
    )  # fmt: skip
    approver = asyncio.create_task(approve_csrs_for(kube, node, stop))
    rotation = asyncio.create_task(rotator.run())
    try:
        async with https_site(tls) as port:
            await asyncio.wait_for(rotator.issued.wait(), 60)
            first = tls.pair
            assert first is not None
            life = first.not_after - first.not_before
            assert life <= datetime.timedelta(minutes=15)  # expirationSeconds=600 honoured
            ctx = ssl.create_default_context(cafile=str(verifying.kubelet_ca_cert))
            ctx.check_hostname = False
            reader, writer = await asyncio.open_connection("127.0.0.1", port, ssl=ctx)
            old_der = writer.get_extra_info("ssl_object").getpeercert(binary_form=True)

            started = time.monotonic()
            while tls.pair is first:
                assert time.monotonic() - started < 60, "not renewed"
                await asyncio.sleep(0.1)
            second = tls.pair
            assert second is not None and second.not_after > first.not_after
            share = (jumped + (datetime.datetime.now(datetime.UTC) - first.not_before)) / life
            assert share >= 0.7  # renewed no earlier than 70% of the first one's life

            _, new_writer = await asyncio.open_connection("127.0.0.1", port, ssl=ctx)
            new_der = new_writer.get_extra_info("ssl_object").getpeercert(binary_form=True)
            new_writer.close()
            assert x509.load_der_x509_certificate(new_der).not_valid_after_utc == second.not_after
            writer.write(b"GET / HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
            assert (await reader.read()).endswith(b"ok")  # the old connection still works
            writer.close()
            assert x509.load_der_x509_certificate(old_der).not_valid_after_utc == first.not_after
    finally:
        stop.set()
        rotation.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await rotation
        await approver
        await client.close()
    assert events.reasons.count("ServingCertificateIssued") == 2
    assert events.reasons[0] == "ServingCertificatePending"
