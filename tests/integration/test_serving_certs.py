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
import subprocess
import sys
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
from tests.namespaces import create_namespace
from vkpy.api.certs.csr import CURRENT, USAGES, CertificateRotator
from vkpy.api.certs.tls import ServingTLS
from vkpy.api.certs.x509 import serving_csr
from vkpy.core.clock import SystemClock
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
    create_namespace(access.run_kubectl, name)
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

    class JumpingClock(SystemClock):
        """Real time, plus the waits for the renewal time skipped."""

        def time(self) -> float:
            return super().time() + jumped.total_seconds()

        async def sleep(self, seconds: float) -> None:
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
        clock=JumpingClock(), expiration_seconds=600,
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


# --- the opt-in approver (python -m vkpy.tools.approver) ----------------------------------------


@pytest.fixture
def approver(verifying: DevCluster, tmp_path: Path) -> Iterator[Path]:
    """`python -m vkpy.tools.approver` allowing the test's own user (who starts vkpy here);
    yields its log."""
    access = verifying.access()
    me = json.loads(access.run_kubectl("auth", "whoami", "-o", "json").stdout)
    user = me["status"]["userInfo"]["username"]
    log_path = tmp_path / "approver.log"
    with log_path.open("wb") as log:
        process = subprocess.Popen(
            [
                sys.executable, "-m", "vkpy.tools.approver",
                f"--kubeconfig={verifying.kubeconfig}",
                f"--allowed-requester={user}",
                "--interval=0.5", "--settle-seconds=5", "--log-format=text",
            ],
            stdout=log, stderr=log,
        )  # fmt: skip
    try:
        yield log_path
    finally:
        process.terminate()
        process.wait(timeout=30)
        print(f"--- approver log ---\n{log_path.read_text(errors='replace')[-8000:]}")


def submit_csr(kube: Kube, request_pem: bytes, signer: str, usages: list[str]) -> str:
    name = f"probe-{secrets.token_hex(3)}"
    kube.create(
        {
            "apiVersion": "certificates.k8s.io/v1",
            "kind": "CertificateSigningRequest",
            "metadata": {"name": name},
            "spec": {
                "request": base64.b64encode(request_pem).decode(),
                "signerName": signer,
                "usages": usages,
            },
        }
    )
    return name


def csr_conditions(kube: Kube, name: str) -> list[str]:
    csr = json.loads(kube.kubectl("get", "csr", name, "-o", "json"))
    return [c["type"] for c in csr.get("status", {}).get("conditions", [])]


def test_the_approver_approves_vkpy_and_refuses_the_rest(
    verifying: DevCluster, kube: Kube, agents: list[Agent], tmp_path: Path, approver: Path
) -> None:
    agent = start(verifying, tmp_path, agents, "--rotate-server-certificates")
    cert = wait_for("the approved certificate served", lambda: served_certificate(agent.port), 60)
    assert issued_by_kubelet_ca(cert, verifying)
    assert logs_reach_vkpy(kube, agent.node_name).startswith("line ")
    ours = [
        c for c in json.loads(kube.kubectl("get", "csr", "-o", "json"))["items"]
        if any(x.get("reason") == "VkpyServingApprover" for x in c["status"].get("conditions", []))
        and f"system:node:{agent.node_name}" in x509.load_pem_x509_csr(
            base64.b64decode(c["spec"]["request"])
        ).subject.rfc4514_string()
    ]  # fmt: skip
    assert [c["status"]["conditions"][0]["type"] for c in ours] == ["Approved"]

    # the node's name with an address that is not the node's: denied once it settled
    wide, _ = serving_csr(agent.node_name, ["127.0.0.1", "10.99.0.1", "kubernetes.default"])
    wide_name = submit_csr(kube, wide, "kubernetes.io/kubelet-serving", USAGES)
    # a client certificate for a node through the serving signer: denied at once
    client_usage = submit_csr(
        kube,
        serving_csr(agent.node_name, ["127.0.0.1"])[0],
        "kubernetes.io/kubelet-serving",
        ["digital signature", "client auth"],
    )
    # another signer: none of the approver's business, left pending
    other, _ = serving_csr(agent.node_name, ["127.0.0.1"])
    other_name = submit_csr(kube, other, "kubernetes.io/kube-apiserver-client", ["client auth"])
    wait_for("client usage denied", lambda: csr_conditions(kube, client_usage) == ["Denied"], 30)
    wait_for("extra SANs denied", lambda: csr_conditions(kube, wide_name) == ["Denied"], 30)
    time.sleep(2)
    assert csr_conditions(kube, other_name) == []
    assert agent.alive()
    for name in (wide_name, client_usage, other_name):
        kube.kubectl("delete", "csr", name)


# --- secret mode: a mounted TLS Secret, rotated by the kubelet's atomic writer ----------


def write_like_a_secret_volume(mount: Path, files: dict[str, bytes]) -> None:
    """What the kubelet does to a Secret volume on change: a new timestamped directory,
    then `..data` swapped atomically to it; tls.crt/tls.key are links via `..data`."""
    stamp = mount / f"..{time.strftime('%Y_%m_%d_%H_%M_%S')}.{secrets.token_hex(4)}"
    stamp.mkdir()
    for name, data in files.items():
        (stamp / name).write_bytes(data)
    staging = mount / "..data_tmp"
    staging.symlink_to(stamp.name)
    staging.rename(mount / "..data")
    for name in files:
        link = mount / name
        if not link.is_symlink():
            link.symlink_to(f"..data/{name}")


def test_a_mounted_tls_secret_is_reloaded_when_rotated(
    verifying: DevCluster, kube: Kube, agents: list[Agent], tmp_path: Path
) -> None:
    ca = CertificateAuthority.load(verifying.kubelet_ca_cert, verifying.kubelet_ca_key)
    mount = tmp_path / "secret-volume"
    mount.mkdir()

    def rotate(common_name: str) -> None:
        cert, key = ca.issue(common_name, ip_addresses=["127.0.0.1"], server=True)
        write_like_a_secret_volume(mount, {"tls.crt": cert, "tls.key": key})

    rotate("first")
    agent = start(
        verifying,
        tmp_path,
        agents,
        f"--tls-cert-file={mount / 'tls.crt'}",
        f"--tls-private-key-file={mount / 'tls.key'}",
    )
    assert logs_reach_vkpy(kube, agent.node_name).startswith("line ")
    first = served_certificate(agent.port)
    assert first is not None and first.subject.rfc4514_string() == "CN=first"
    rotate("second")
    wait_for(
        "the rotated Secret served",
        lambda: (c := served_certificate(agent.port)) and c.subject.rfc4514_string() == "CN=second",
        timeout=30,
    )
    assert agent.alive()
