"""The local control plane does what vkpy relies on, checked as a user would.

Everything here goes through the pinned kubectl and the real components: the API
server answers with the pinned release, the scheduler binds pods to a Ready node, the
controller-manager signs kubelet-serving CSRs with the kubelet signing CA, the API
server dials a kubelet with its kubelet-client certificate (verifying the kubelet's
certificate only when told to), and the command line starts and stops it all.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import datetime
import ipaddress
import json
import os
import re
import secrets
import signal
import ssl
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from aiohttp import web
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID
from cryptography.x509.verification import PolicyBuilder, Store, VerificationError

from tests.namespaces import wait_for_default_service_account
from tests.processes import pid_alive, processes_under, running_with
from vkpy.devcluster import (
    BinariesMissing,
    CertificateAuthority,
    ClusterAccess,
    ComponentFailed,
    DevCluster,
    RunKubectl,
    Settings,
    find_bin_dir,
)

REPO = Path(__file__).resolve().parents[2]


def pinned_release_from_go_mod() -> str:
    match = re.search(
        r"^\s*k8s\.io/kubernetes (v\S+)", (REPO / "controlplane/go.mod").read_text(), re.M
    )
    assert match, "controlplane/go.mod pins no k8s.io/kubernetes"
    return match.group(1)


def unique(prefix: str) -> str:
    return f"{prefix}-{secrets.token_hex(4)}"


def now() -> str:
    return datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


# -- nodes and pods ------------------------------------------------------------------


@contextlib.contextmanager
def ready_node(run_kubectl: RunKubectl, kubelet_port: int = 10250) -> Iterator[str]:
    """A Node object that looks like a Ready kubelet at 127.0.0.1:<kubelet_port>."""
    name = unique("vkpy-node")
    node = {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": name,
            "labels": {"kubernetes.io/hostname": name, "type": "virtual-kubelet"},
        },
    }
    run_kubectl("create", "-f", "-", input=json.dumps(node))
    try:
        resources = {"cpu": "4", "memory": "8Gi", "pods": "110"}
        status = {
            "status": {
                "capacity": resources,
                "allocatable": resources,
                "conditions": [
                    {
                        "type": "Ready",
                        "status": "True",
                        "reason": "KubeletReady",
                        "message": "patched by the test",
                        "lastHeartbeatTime": now(),
                        "lastTransitionTime": now(),
                    }
                ],
                "addresses": [
                    {"type": "InternalIP", "address": "127.0.0.1"},
                    {"type": "Hostname", "address": name},
                ],
                "daemonEndpoints": {"kubeletEndpoint": {"Port": kubelet_port}},
            }
        }
        run_kubectl(
            "patch", "node", name, "--subresource=status", "--type=merge", "-p", json.dumps(status)
        )
        yield name
    finally:
        run_kubectl("delete", "node", name, "--wait=false", check=False)


def create_pod(run_kubectl: RunKubectl, namespace: str, spec_extra: dict[str, object]) -> str:
    name = unique("pod")
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {
            "containers": [{"name": "app", "image": "example.invalid/app:1"}],
            "tolerations": [{"operator": "Exists"}],
            **spec_extra,
        },
    }
    run_kubectl("create", "-f", "-", input=json.dumps(pod))
    return name


# -- the API server and the scheduler ------------------------------------------------


@pytest.mark.cluster
def test_readyz_and_pinned_version(run_kubectl: RunKubectl) -> None:
    assert run_kubectl("get", "--raw", "/readyz").stdout == "ok"
    version = json.loads(run_kubectl("version", "-o", "json").stdout)
    release = pinned_release_from_go_mod()
    assert version["serverVersion"]["gitVersion"] == release
    assert version["clientVersion"]["gitVersion"] == release


@pytest.mark.cluster
def test_scheduler_binds_pod_to_ready_node(run_kubectl: RunKubectl, namespace: str) -> None:
    with ready_node(run_kubectl) as node:
        pod = create_pod(run_kubectl, namespace, {"nodeSelector": {"kubernetes.io/hostname": node}})
        run_kubectl(
            "wait", f"pod/{pod}", "-n", namespace, "--timeout=60s",
            f"--for=jsonpath={{.spec.nodeName}}={node}",
            timeout=70,
        )  # fmt: skip
        events = run_kubectl(
            "get", "events", "-n", namespace, "-o", "json",
            f"--field-selector=involvedObject.name={pod},reason=Scheduled",
        )  # fmt: skip
        sources = {
            e.get("reportingComponent") or e["source"].get("component")
            for e in json.loads(events.stdout)["items"]
        }
        assert sources == {"default-scheduler"}


@pytest.mark.cluster
def test_service_account_tokens_authenticate(
    cluster: ClusterAccess, namespace: str, tmp_path: Path
) -> None:
    """A TokenRequest token (what a kubelet mounts into pods) is accepted as its account."""
    token = cluster.run_kubectl("create", "token", "default", "-n", namespace).stdout.strip()
    ca_data = cluster.run_kubectl(
        "config", "view", "--raw", "--minify",
        "-o", "jsonpath={.clusters[0].cluster.certificate-authority-data}",
    ).stdout  # fmt: skip
    (tmp_path / "ca.crt").write_bytes(base64.b64decode(ca_data))
    as_service_account = subprocess.run(
        [
            str(cluster.kubectl), "--kubeconfig=/dev/null", f"--server={cluster.server}",
            f"--certificate-authority={tmp_path / 'ca.crt'}", f"--token={token}",
            "auth", "whoami", "-o", "json",
        ],
        capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert as_service_account.returncode == 0, as_service_account.stderr
    user = json.loads(as_service_account.stdout)["status"]["userInfo"]
    assert user["username"] == f"system:serviceaccount:{namespace}:default"
    assert f"system:serviceaccounts:{namespace}" in user["groups"]


# -- the controller-manager signs kubelet serving certificates ------------------------


def kubelet_serving_csr(node: str) -> tuple[bytes, ec.EllipticCurvePrivateKey]:
    key = ec.generate_private_key(ec.SECP256R1())
    subject = x509.Name(
        [
            x509.NameAttribute(NameOID.ORGANIZATION_NAME, "system:nodes"),
            x509.NameAttribute(NameOID.COMMON_NAME, f"system:node:{node}"),
        ]
    )
    san = x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address("127.0.0.1"))])
    csr = (
        x509.CertificateSigningRequestBuilder()
        .subject_name(subject)
        .add_extension(san, critical=False)
        .sign(key, hashes.SHA256())
    )
    return csr.public_bytes(serialization.Encoding.PEM), key


def wait_for_certificate(run_kubectl: RunKubectl, csr: str, timeout: float = 30) -> bytes:
    deadline = time.monotonic() + timeout
    while True:
        got = run_kubectl("get", "csr", csr, "-o", "jsonpath={.status.certificate}").stdout
        if got:
            return base64.b64decode(got)
        assert time.monotonic() < deadline, f"CSR {csr} approved but never signed"
        time.sleep(0.2)


@pytest.mark.cluster
def test_approved_kubelet_serving_csr_is_signed_by_kubelet_ca(
    local_cluster: DevCluster,
) -> None:
    run_kubectl = local_cluster.access().run_kubectl
    node, name = unique("vkpy-node"), unique("vkpy-csr")
    request_pem, key = kubelet_serving_csr(node)
    csr = {
        "apiVersion": "certificates.k8s.io/v1",
        "kind": "CertificateSigningRequest",
        "metadata": {"name": name},
        "spec": {
            "request": base64.b64encode(request_pem).decode(),
            "signerName": "kubernetes.io/kubelet-serving",
            "usages": ["digital signature", "key encipherment", "server auth"],
        },
    }
    run_kubectl("create", "-f", "-", input=json.dumps(csr))
    try:
        run_kubectl("certificate", "approve", name)
        cert = x509.load_pem_x509_certificate(wait_for_certificate(run_kubectl, name))
    finally:
        run_kubectl("delete", "csr", name, "--wait=false", check=False)

    kubelet_ca = x509.load_pem_x509_certificate(local_cluster.kubelet_ca_cert.read_bytes())
    cluster_ca = x509.load_pem_x509_certificate(local_cluster.ca_cert.read_bytes())
    server_name = x509.IPAddress(ipaddress.ip_address("127.0.0.1"))
    PolicyBuilder().store(Store([kubelet_ca])).build_server_verifier(server_name).verify(cert, [])
    with pytest.raises(VerificationError):
        PolicyBuilder().store(Store([cluster_ca])).build_server_verifier(server_name).verify(
            cert, []
        )
    assert cert.subject.get_attributes_for_oid(NameOID.COMMON_NAME)[0].value == (
        f"system:node:{node}"
    )
    assert cert.public_key() == key.public_key()
    usages = cert.extensions.get_extension_for_class(x509.ExtendedKeyUsage).value
    assert list(usages) == [ExtendedKeyUsageOID.SERVER_AUTH]


# -- the API server reaches a kubelet ---------------------------------------------------


@dataclass
class FakeKubelet:
    """An HTTPS server on 127.0.0.1 that answers /containerLogs like a kubelet."""

    port: int
    body: str
    requests: list[tuple[str, str]] = field(default_factory=list)  # (path, client CN)


@contextlib.asynccontextmanager
async def fake_kubelet(
    serving: tuple[bytes, bytes], client_ca: Path, tmp_path: Path
) -> AsyncIterator[FakeKubelet]:
    """Serve with `serving` (cert, key PEM); require a client cert from `client_ca`."""
    (tmp_path / "kubelet.crt").write_bytes(serving[0])
    (tmp_path / "kubelet.key").write_bytes(serving[1])
    ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH, cafile=client_ca)
    ctx.load_cert_chain(tmp_path / "kubelet.crt", tmp_path / "kubelet.key")
    ctx.verify_mode = ssl.CERT_REQUIRED
    kubelet = FakeKubelet(port=0, body=f"hello from the fake kubelet {secrets.token_hex(8)}\n")

    async def container_logs(request: web.Request) -> web.Response:
        peer = request.transport.get_extra_info("peercert") if request.transport else None
        subject = dict(pair[0] for pair in peer["subject"]) if peer else {}
        kubelet.requests.append((request.path, subject.get("commonName", "")))
        return web.Response(text=kubelet.body)

    app = web.Application()
    app.router.add_get("/containerLogs/{namespace}/{pod}/{container}", container_logs)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0, ssl_context=ctx)
    await site.start()
    kubelet.port = runner.addresses[0][1]
    try:
        yield kubelet
    finally:
        await runner.cleanup()


@pytest.fixture(scope="module")
def verifying_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[DevCluster]:
    dev = DevCluster(tmp_path_factory.mktemp("verifying-cluster"), verify_kubelet_certs=True)
    dev.up()
    try:
        yield dev
    finally:
        dev.down()


@pytest.mark.cluster
@pytest.mark.parametrize(
    ("which", "issuer", "reachable"),
    [
        ("default", "kubelet-ca", True),
        ("default", "stranger", True),  # not verified by default, as in kubeadm
        ("verifying", "kubelet-ca", True),
        ("verifying", "stranger", False),
    ],
)
async def test_kubectl_logs_reach_the_kubelet(
    request: pytest.FixtureRequest, tmp_path: Path, which: str, issuer: str, reachable: bool
) -> None:
    dev: DevCluster = request.getfixturevalue(
        "local_cluster" if which == "default" else "verifying_cluster"
    )
    run_kubectl = dev.access().run_kubectl
    if issuer == "kubelet-ca":
        ca = CertificateAuthority.load(dev.kubelet_ca_cert, dev.kubelet_ca_key)
    else:
        ca = CertificateAuthority.create("not-the-kubelet-ca")
    serving = ca.issue("system:node:fake", ip_addresses=["127.0.0.1"], server=True)

    async with fake_kubelet(serving, dev.ca_cert, tmp_path) as kubelet:
        with ready_node(run_kubectl, kubelet.port) as node:
            namespace = unique("vkpy-t")
            run_kubectl("create", "namespace", namespace)
            try:
                await asyncio.to_thread(wait_for_default_service_account, run_kubectl, namespace)
                pod = create_pod(run_kubectl, namespace, {"nodeName": node})
                result = await asyncio.to_thread(
                    run_kubectl, "logs", "-n", namespace, pod, "-c", "app", check=False
                )
            finally:
                run_kubectl("delete", "namespace", namespace, "--wait=false", check=False)

    if reachable:
        assert result.returncode == 0, result.stderr
        assert result.stdout == kubelet.body
        assert kubelet.requests == [
            (f"/containerLogs/{namespace}/{pod}/app", "kube-apiserver-kubelet-client")
        ]
    else:
        assert result.returncode != 0
        assert kubelet.body not in result.stdout
        assert "x509: certificate signed by unknown authority" in result.stderr, result.stderr
        assert kubelet.requests == [], result.stderr


# -- starting and stopping --------------------------------------------------------------


def devcluster_cli(*args: str, timeout: float = 240) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != "VKPY_CLUSTER_DIR"}
    return subprocess.run(
        [sys.executable, "-m", "vkpy.devcluster", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        env=env,
        cwd=REPO,
        check=False,
    )


@pytest.mark.cluster
def test_cli_up_env_down_leaves_nothing_running(tmp_path: Path, kubectl: Path) -> None:
    cluster_dir = tmp_path / "cli-cluster"
    up = devcluster_cli("up", "--dir", str(cluster_dir), "--workers", "1")
    assert up.returncode == 0, up.stderr
    kubeconfig = cluster_dir / "kubeconfig"
    assert f"export KUBECONFIG={kubeconfig}" in up.stdout
    state = json.loads((cluster_dir / "state.json").read_text())
    pids = {p["name"]: p["pid"] for p in state["processes"]}
    addons = json.loads((cluster_dir / "addons.json").read_text())
    addon_pids = {a["process"]["name"]: a["process"]["pid"] for a in addons}
    try:
        # The image registry the nodes pull from (vkpy/devcluster/registry.py) too, and
        # (a worker as root gives each pod a network of its own) the API server's relay
        # its pods reach it through (vkpy/devcluster/pod_network.py).
        relay = {"api-relay"} if os.geteuid() == 0 else set()
        assert set(addon_pids) == {"metrics-server", "registry", "vkpy-worker-1", *relay}
        assert all(map(pid_alive, addon_pids.values()))
        assert set(pids) == {
            "etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler"
        }  # fmt: skip
        assert all(map(pid_alive, pids.values()))
        access = ClusterAccess(kubeconfig=kubeconfig, kubectl=kubectl)
        assert access.run_kubectl("get", "--raw", "/readyz").stdout == "ok"
        # A pod running on the worker when `down` comes.
        _run_pod_on(access, "vkpy-worker-1")
        worker_state = cluster_dir / "nodes" / "vkpy-worker-1" / "state"
        pods = worker_state / "process" / "pods"  # oci: a link to pods kept outside
        places = [cluster_dir, pods, pods.resolve()]
        assert processes_under(cluster_dir / "nodes" / "vkpy-worker-1")
        assert any(processes_under(place) for place in places[1:])

        again = devcluster_cli("up", "--dir", str(cluster_dir))
        assert again.returncode == 0, again.stderr
        assert "already running" in again.stdout
        assert json.loads((cluster_dir / "state.json").read_text()) == state

        env = devcluster_cli("env", "--dir", str(cluster_dir))
        assert env.returncode == 0, env.stderr
        assert f"export KUBECONFIG={kubeconfig}" in env.stdout
        assert f"export PATH={kubectl.parent}:" in env.stdout
        assert f"export VKPY_CLUSTER_DIR={cluster_dir}" in env.stdout

        _run_until_sigterm(cluster_dir, tmp_path / "run.out", access)
    finally:
        down = devcluster_cli("down", "--dir", str(cluster_dir))
    assert down.returncode == 0, down.stderr
    assert [name for name, pid in pids.items() if pid_alive(pid)] == []
    assert [name for name, pid in addon_pids.items() if pid_alive(pid)] == []
    assert processes_under(cluster_dir) == []  # nor the pods of `run`'s node
    assert [p for place in places for p in processes_under(place)] == []  # nor the worker's
    stopped_env = devcluster_cli("env", "--dir", str(cluster_dir))
    assert stopped_env.returncode == 1
    assert "no cluster is running" in stopped_env.stderr


def _run_pod_on(access: ClusterAccess, node: str) -> None:
    wait_for_default_service_account(access.run_kubectl, "default")
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "sleeper", "namespace": "default"},
        "spec": {
            "nodeName": node,
            "containers": [{"name": "c", "image": "busybox", "command": ["sleep", "3600"]}],
        },
    }
    access.run_kubectl("apply", "-f", "-", input=json.dumps(pod))
    deadline = time.monotonic() + 60
    while (
        "Running"
        not in access.run_kubectl(
            "get", "pod", "sleeper", "-o", "jsonpath={.status.phase}", check=False
        ).stdout
    ):
        assert time.monotonic() < deadline, "the pod on the worker is not Running"
        time.sleep(0.5)


def _run_until_sigterm(cluster_dir: Path, out: Path, access: ClusterAccess) -> None:
    """`devcluster run` (what `make run` calls): `kubectl top` works on its virtual node
    and its pod as on the regular worker (metrics-server verifies the node's serving
    certificate); a service manager or a terminal closing stops it with SIGTERM, not
    only Ctrl-C: its virtual node must stop too."""
    node = "vk-cli-run"
    with out.open("w") as sink:
        run = subprocess.Popen(
            [sys.executable, "-m", "vkpy.devcluster", "run", "--dir", str(cluster_dir),
             "--node-name", node],
            stdout=sink, stderr=subprocess.STDOUT, cwd=REPO,
        )  # fmt: skip
    try:
        deadline = time.monotonic() + 120
        while f"Node {node} is Ready" not in out.read_text():
            assert run.poll() is None, out.read_text()
            assert time.monotonic() < deadline, out.read_text()
            time.sleep(0.5)
        vkpy = [pid for pid in running_with(f"--node-name={node}") if pid != run.pid]
        assert vkpy, "no vkpy process for the node"
        _wait_for_top(access, ("node",), {node, "vkpy-worker-1"})
        _wait_for_top(access, ("pod", "hello"), {"hello"})  # examples/hello.yaml, on `node`
        run.send_signal(signal.SIGTERM)
        assert run.wait(timeout=60) == 0, out.read_text()
        assert [pid for pid in vkpy if pid_alive(pid)] == [], out.read_text()
    finally:
        if run.poll() is None:
            run.kill()
            run.wait()


def _wait_for_top(access: ClusterAccess, what: tuple[str, ...], names: set[str]) -> None:
    """Until `kubectl top <what>` lists `names` (metrics-server scrapes every 10 s)."""
    deadline = time.monotonic() + 120
    while True:
        top = access.run_kubectl("top", *what, "--no-headers", check=False)
        listed = {line.split()[0] for line in top.stdout.splitlines() if line.strip()}
        if names <= listed:
            return
        assert time.monotonic() < deadline, (what, top.stdout, top.stderr)
        time.sleep(2)


@pytest.mark.cluster
def test_failing_component_is_reported_and_the_rest_stopped(tmp_path: Path) -> None:
    dev = DevCluster(tmp_path / "broken", settings=Settings(service_cluster_ip_range="bogus"))
    with pytest.raises(ComponentFailed) as failed:
        dev.up()
    assert failed.value.component == "kube-apiserver"
    assert "service-cluster-ip-range" in str(failed.value)  # the log tail names the flag
    state = json.loads(dev.state_file.read_text())
    assert state["processes"] == []
    for log in ("etcd", "kube-apiserver"):
        assert (dev.logs_dir / f"{log}.log").exists()
    assert not processes_under(dev.dir)


@pytest.mark.cluster
def test_start_timeout_names_the_stuck_component_and_stops_it(tmp_path: Path) -> None:
    dev = DevCluster(tmp_path / "slow", settings=Settings(start_timeout=0))
    with pytest.raises(
        ComponentFailed, match=r"etcd was not ready after 0 s \(waiting for GET /health\)"
    ):
        dev.up()
    assert json.loads(dev.state_file.read_text())["processes"] == []
    assert not processes_under(dev.dir)


def test_missing_binaries_say_how_to_get_them(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "etcd").write_text("#!/bin/sh\n")
    (tmp_path / "etcd").chmod(0o755)
    monkeypatch.setenv("VKPY_CONTROLPLANE_BIN", str(tmp_path))
    with pytest.raises(BinariesMissing) as missing:
        find_bin_dir()
    message = str(missing.value)
    named = message.split("lacks executable ")[1].split(".", maxsplit=1)[0].split(", ")
    assert named == ["kube-apiserver", "kube-controller-manager", "kube-scheduler", "kubectl"]
    assert "controlplane/build.sh" in message
    assert "Go 1.26" in message
    assert "VKPY_CONTROLPLANE_BIN" in message
