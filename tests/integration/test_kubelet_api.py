"""The kubelet API of a real `python -m vkpy` (sim backend), reached as users reach
it: through the real API server with the pinned kubectl (logs), and directly on its
port on 127.0.0.1 with real credentials (stats and resource metrics as metrics-server
reads them, with a ServiceAccount token; ServiceAccount tokens with and without RBAC,
the admin's client certificate, nothing at all).
"""

from __future__ import annotations

import base64
import http.client
import itertools
import json
import re
import socket
import ssl
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
import yaml
from prometheus_client.parser import text_string_to_metric_families

from tests.integration.agent import Agent, Kube, free_port, sim_pod, wait_for
from tests.integration.conftest import StartAgent
from vkpy.devcluster import ClusterAccess

LINE = re.compile(rb"^line (\d+) of (\S+) \(run (\d+)\) on (stdout|stderr)$")
STAMPED = re.compile(rb"^(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{9}Z) (.*)$")


# --- helpers -------------------------------------------------------------------------


@dataclass
class Reply:
    status: int
    body: bytes
    headers: dict[str, str]

    @property
    def text(self) -> str:
        return self.body.decode(errors="replace")


def kubelet(
    port: int,
    path: str,
    *,
    token: str | None = None,
    cert: tuple[Path, Path] | None = None,
    headers: dict[str, str] | None = None,
    method: str = "GET",
    host: str = "127.0.0.1",
) -> Reply:
    """One HTTPS request straight to a kubelet port (its certificate is not checked)."""
    ctx = ssl.create_default_context()
    ctx.check_hostname = False
    ctx.verify_mode = ssl.CERT_NONE
    if cert:
        ctx.load_cert_chain(*cert)
    connection = http.client.HTTPSConnection(host, port, context=ctx, timeout=30)
    try:
        all_headers = dict(headers or {})
        if token:
            all_headers["Authorization"] = f"Bearer {token}"
        connection.request(method, path, headers=all_headers)
        response = connection.getresponse()
        return Reply(response.status, response.read(), dict(response.getheaders()))
    finally:
        connection.close()


def admin_cert(cluster: ClusterAccess, directory: Path) -> tuple[Path, Path]:
    """The kubeconfig user's client certificate (system:masters) as files."""
    config = yaml.safe_load(cluster.kubeconfig.read_text())
    user = config["users"][0]["user"]
    cert, key = directory / "admin.crt", directory / "admin.key"
    cert.write_bytes(base64.b64decode(user["client-certificate-data"]))
    key.write_bytes(base64.b64decode(user["client-key-data"]))
    return cert, key


def running(kube: Kube, name: str, timeout: float = 60) -> dict[str, Any]:
    pod: dict[str, Any] = wait_for(
        f"pod {name} Running",
        lambda: (p := kube.get("pod", name)) and p["status"].get("phase") == "Running" and p,
        timeout=timeout,
    )
    return pod


def parse_lines(text: str) -> list[tuple[int, str, int, str]]:
    out = []
    for raw in text.encode().splitlines():
        match = LINE.match(raw)
        assert match, raw
        out.append((int(match[1]), match[2].decode(), int(match[3]), match[4].decode()))
    return out


def logs(kube: Kube, *args: str) -> str:
    return kube.kubectl("logs", "-n", kube.namespace, *args)


@pytest.fixture
def node_and_pod(kube: Kube, start_agent: StartAgent) -> Iterator[tuple[Agent, str]]:
    """An agent and a running pod with two containers that have printed >= 6 lines."""
    agent = start_agent()
    containers = [{"name": "app", "image": "example.com/a:1"}, {"name": "side", "image": "b:1"}]
    kube.create(sim_pod("talker", agent.node_name, containers=containers))
    running(kube, "talker")
    wait_for("6 lines", lambda: len(logs(kube, "talker", "-c", "app").splitlines()) >= 6)
    yield agent, "talker"


# --- kubectl logs through the API server ------------------------------------------------


def test_kubectl_logs_tail_timestamps_limit_and_containers(
    kube: Kube, node_and_pod: tuple[Agent, str]
) -> None:
    _, pod = node_and_pod
    lines = parse_lines(logs(kube, pod, "-c", "app"))
    assert [n for n, *_ in lines] == list(range(len(lines)))
    assert {(c, r) for _, c, r, _ in lines} == {("app", 0)}
    assert {s for *_, s in lines} == {"stdout", "stderr"}
    assert [s for n, _, _, s in lines if n % 5 == 4] == ["stderr"] * (len(lines) // 5)

    tail = parse_lines(logs(kube, pod, "-c", "app", "--tail=2"))
    assert len(tail) == 2
    assert tail[1][0] == tail[0][0] + 1 >= lines[-1][0]

    stamped = logs(kube, pod, "-c", "app", "--timestamps").encode().splitlines()
    times = []
    for raw in stamped:
        match = STAMPED.match(raw)
        assert match, raw
        assert LINE.match(match[2])
        times.append(datetime.strptime(match[1].decode()[:26], "%Y-%m-%dT%H:%M:%S.%f"))
    assert all(b - a == timedelta(seconds=1) for a, b in itertools.pairwise(times))

    limited = logs(kube, pod, "-c", "app", "--limit-bytes=20")
    assert limited == "line 0 of app (run 0"

    third = stamped[3].split(b" ", 1)[0].decode()
    since_time = parse_lines(logs(kube, pod, "-c", "app", f"--since-time={third}"))
    assert since_time[0][0] == 3

    recent = parse_lines(logs(kube, pod, "-c", "app", "--since=3s"))
    assert 1 <= len(recent) <= 4
    assert recent[-1][0] >= lines[-1][0]

    side = parse_lines(logs(kube, pod, "-c", "side"))
    assert {c for _, c, _, _ in side} == {"side"}
    both = parse_lines(logs(kube, pod, "--all-containers"))
    assert {c for _, c, _, _ in both} == {"app", "side"}


def test_kubectl_logs_follow_gets_new_lines_and_ends_with_the_container(
    kube: Kube, start_agent: StartAgent
) -> None:
    agent = start_agent()
    kube.create(sim_pod("short", agent.node_name, {"sim.vkpy.io/run-seconds": "6"}))
    running(kube, "short")
    argv = kube.cluster.kubectl_argv("logs", "-f", "-n", kube.namespace, "short")
    started = time.monotonic()
    follower = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    arrivals: list[tuple[float, bytes]] = []
    try:
        assert follower.stdout is not None
        for raw in follower.stdout:
            arrivals.append((time.monotonic() - started, raw.rstrip(b"\n")))
        assert follower.wait(timeout=30) == 0, follower.stderr.read() if follower.stderr else ""
    finally:
        if follower.poll() is None:
            follower.kill()
    numbers = [int(LINE.match(raw)[1]) for _, raw in arrivals]  # type: ignore[index]
    assert numbers == list(range(7))  # one line a second for 6 s: lines 0..6
    assert arrivals[-1][0] - arrivals[0][0] >= 2.0  # later lines arrived while following
    assert time.monotonic() - started < 20  # and it ended with the container
    assert kube.phase("short") in ("Succeeded", "Running")


def test_kubectl_logs_previous_after_a_restart(kube: Kube, start_agent: StartAgent) -> None:
    agent = start_agent(config={"restart_delay": 1})
    kube.create(
        sim_pod(
            "crashy",
            agent.node_name,
            {"sim.vkpy.io/run-seconds": "3", "sim.vkpy.io/exit-code": "1"},
            restart_policy="Always",
        )
    )
    wait_for(
        "a restart",
        lambda: (
            (p := kube.get("pod", "crashy"))
            and any(s.get("restartCount", 0) >= 1 for s in p["status"].get("containerStatuses", []))
        ),
    )

    def consistent() -> tuple[set[int], set[int]] | None:
        previous = {r for _, _, r, _ in parse_lines(logs(kube, "crashy", "--previous"))}
        current = {r for _, _, r, _ in parse_lines(logs(kube, "crashy"))}
        if len(previous) == len(current) == 1 and min(current) - min(previous) in (0, 1):
            return previous, current
        return None

    previous, current = wait_for("previous and current runs", consistent, timeout=20)
    assert min(current) >= 1  # restarted at least once: run 1 or later (or it just crashed)
    assert min(previous) >= 0
    lines = parse_lines(logs(kube, "crashy", "--previous"))
    assert [n for n, *_ in lines] == list(range(4))  # a whole 3 s run: lines 0..3


# --- stats and resource metrics on the kubelet port ---------------------------------------


def test_stats_summary_and_resource_metrics_from_the_kubelet_port(
    kube: Kube, start_agent: StartAgent, rbac_cleanup: None
) -> None:
    # Not through the node proxy: the API server does not proxy to loopback node
    # addresses, and tests may only use loopback.
    agent = start_agent()
    kube.create(sim_pod("busy", agent.node_name, {"sim.vkpy.io/cpu-cores": "0.5"}))
    running(kube, "busy")
    token = service_account(kube, "scraper", ["stats", "metrics"])  # as metrics-server's

    def get(path: str) -> str:
        reply = kubelet(agent.port, path, token=token)
        assert reply.status == 200, (path, reply.status, reply.text)
        return reply.text

    summary = json.loads(get("/stats/summary"))
    assert summary["node"]["nodeName"] == agent.node_name
    assert summary["node"]["cpu"]["usageCoreNanoSeconds"] > 0
    assert summary["node"]["memory"]["workingSetBytes"] > 0
    (pod,) = [p for p in summary["pods"] if p["podRef"]["name"] == "busy"]
    assert pod["podRef"]["namespace"] == kube.namespace
    (app,) = pod["containers"]
    assert app["name"] == "app"
    assert app["cpu"]["usageCoreNanoSeconds"] > 0
    assert app["cpu"]["usageNanoCores"] > 0
    assert app["memory"]["workingSetBytes"] == 32 * 2**20
    assert pod["cpu"]["usageCoreNanoSeconds"] > 0
    only = json.loads(get("/stats/summary?only_cpu_and_memory=true"))
    assert only["pods"]

    def scrape() -> dict[str, Any]:
        return {f.name: f for f in text_string_to_metric_families(get("/metrics/resource"))}

    first = scrape()
    for name in (
        "node_cpu_usage_seconds",
        "node_memory_working_set_bytes",
        "container_cpu_usage_seconds",
        "container_memory_working_set_bytes",
        "container_start_time_seconds",
        "pod_cpu_usage_seconds",
        "pod_memory_working_set_bytes",
    ):
        assert first[name].samples, name
        for sample in first[name].samples:
            assert sample.value > 0, (name, sample)
    assert first["resource_scrape_error"].samples[0].value == 0
    ours = [
        s
        for s in first["container_cpu_usage_seconds"].samples
        if s.labels == {"container": "app", "pod": "busy", "namespace": kube.namespace}
    ]
    assert len(ours) == 1 and ours[0].timestamp is not None
    assert abs(float(ours[0].timestamp) - time.time()) < 30
    time.sleep(1.1)
    second = scrape()
    again = [s for s in second["container_cpu_usage_seconds"].samples if s.labels == ours[0].labels]
    assert again[0].value > ours[0].value
    node_before = first["node_cpu_usage_seconds"].samples[0].value
    assert second["node_cpu_usage_seconds"].samples[0].value >= node_before


# --- direct requests: authentication and authorization -----------------------------------


def service_account(kube: Kube, name: str, subresources: list[str]) -> str:
    """A ServiceAccount allowed `get` on these nodes subresources; its token."""
    kube.kubectl("create", "serviceaccount", name, "-n", kube.namespace)
    if subresources:
        role = f"{kube.namespace}-{name}"
        kube.kubectl(
            "create", "clusterrole", role, "--verb=get",
            *[f"--resource=nodes/{s}" for s in subresources],
        )  # fmt: skip
        kube.kubectl(
            "create", "clusterrolebinding", role, f"--clusterrole={role}",
            f"--serviceaccount={kube.namespace}:{name}",
        )  # fmt: skip
    return kube.kubectl("create", "token", name, "-n", kube.namespace).strip()


@pytest.fixture
def rbac_cleanup(kube: Kube) -> Iterator[None]:
    yield
    for kind in ("clusterrolebinding", "clusterrole"):
        names = kube.kubectl("get", kind, "-o", "name").split()
        mine = [n for n in names if n.split("/", 1)[1].startswith(kube.namespace + "-")]
        if mine:
            kube.kubectl("delete", *mine, "--wait=false", check=False)


def test_direct_requests_need_credentials_and_rbac(
    kube: Kube, start_agent: StartAgent, tmp_path: Path, rbac_cleanup: None
) -> None:
    agent = start_agent()
    kube.create(sim_pod("web", agent.node_name))
    running(kube, "web")
    nobody = service_account(kube, "nobody", [])
    proxy = service_account(kube, "proxy", ["proxy"])
    stats = service_account(kube, "stats", ["stats"])
    logs_path = f"/containerLogs/{kube.namespace}/web/app"
    port = agent.port

    for path in (logs_path, "/pods", "/stats/summary", "/healthz", "/exec/a/b/c", "/nope"):
        reply = kubelet(port, path)
        assert (reply.status, reply.text) == (401, "Unauthorized"), path
    assert kubelet(port, "/pods", token="not-a-token").status == 401

    denied = kubelet(port, logs_path, token=nobody)
    assert denied.status == 403
    user = f"system:serviceaccount:{kube.namespace}:nobody"
    assert denied.text == (
        f"Forbidden (user={user}, verb=get, resource=nodes, subresource(s)=[proxy])\n"
    )
    assert kubelet(port, "/pods", token=nobody).text.endswith("subresource(s)=[pods proxy])\n")

    allowed = kubelet(port, logs_path, token=proxy)
    assert allowed.status == 200
    assert allowed.text.startswith("line 0 of app (run 0) on stdout\n")
    pods = json.loads(kubelet(port, "/pods", token=proxy).body)
    assert [p["metadata"]["name"] for p in pods["items"]] == ["web"]
    assert kubelet(port, "/stats/summary", token=proxy).status == 403

    assert kubelet(port, "/stats/summary", token=stats).status == 200
    assert kubelet(port, logs_path, token=stats).status == 403
    assert kubelet(port, "/metrics/resource", token=stats).text.endswith(
        "subresource(s)=[metrics])\n"
    )

    admin = kubelet(port, "/pods", cert=admin_cert(kube.cluster, tmp_path))
    assert admin.status == 200, admin.text


def test_anonymous_requests_only_with_the_flag(kube: Kube, start_agent: StartAgent) -> None:
    agent = start_agent(args=["--anonymous-auth=true"])
    wait_for("listening", lambda: kubelet_up(agent.port))
    reply = kubelet(agent.port, "/pods")
    assert reply.status == 403
    assert reply.text == (
        "Forbidden (user=system:anonymous, verb=get, resource=nodes, subresource(s)=[pods proxy])\n"
    )


def kubelet_up(port: int) -> bool:
    try:
        return kubelet(port, "/healthz").status in (200, 401, 403)
    except (OSError, ssl.SSLError, http.client.HTTPException):
        return False


def test_bad_input_is_refused_and_the_server_keeps_serving(
    kube: Kube, start_agent: StartAgent, tmp_path: Path
) -> None:
    agent = start_agent()
    kube.create(sim_pod("web", agent.node_name))
    running(kube, "web")
    cert = admin_cert(kube.cluster, tmp_path)
    ns = kube.namespace
    base = f"/containerLogs/{ns}/web/app"
    cases = {
        f"{base}?tailLines=ten": (400, '{"message": "Unable to decode query."}'),
        f"{base}?sinceTime=yesterday": (400, '{"message": "Unable to decode query."}'),
        f"{base}?limitBytes=0": (422, '{"message": "Invalid request."}'),
        f"{base}?sinceSeconds=5&sinceTime=2026-01-01T00:00:00Z": (
            422,
            '{"message": "Invalid request."}',
        ),
        f"{base}?stream=Stdin": (422, '{"message": "Invalid request."}'),
        f"/containerLogs/{ns}/ghost/app": (404, 'pod "ghost" does not exist'),
        f"/containerLogs/{ns}/web/ghost": (404, 'container "ghost" not found in pod "web"'),
    }
    for path, expected in cases.items():
        reply = kubelet(agent.port, path, cert=cert)
        assert (reply.status, reply.text) == expected, path
    for path in (
        f"/containerLogs/{ns}/web/..%2F..%2F..%2Fetc%2Fpasswd",
        "/containerLogs/../../../../etc/passwd",
        f"/containerLogs/{ns}/web/app/../../../../../etc/shadow",
        f"/containerLogs/{ns}/web%00/app",
        "/stats/../../etc/passwd",
    ):
        reply = kubelet(agent.port, path, cert=cert)
        assert 400 <= reply.status < 500, (path, reply.status)
    # A head too big (past a kubelet's 1 MiB) is answered 431 and the connection
    # closed, possibly while the client is still sending it: either is a refusal.
    try:
        big = kubelet(agent.port, "/pods", cert=cert, headers={"X-Padding": "y" * 2**21})
    except (ssl.SSLError, ConnectionError):
        pass
    else:
        assert 400 <= big.status < 500
    with socket.create_connection(("127.0.0.1", agent.port), timeout=10) as plain:
        plain.sendall(b"GET /pods HTTP/1.1\r\nHost: x\r\n\r\n")  # no TLS at all
        plain.recv(1024)
    ctx = ssl.create_default_context()
    ctx.check_hostname, ctx.verify_mode = False, ssl.CERT_NONE
    with socket.create_connection(("127.0.0.1", agent.port), timeout=10) as raw:
        with ctx.wrap_socket(raw) as tls:
            tls.sendall(b"\x00\x01garbage that is not HTTP\r\n\r\n")
            answer = tls.recv(1024)
            assert answer.startswith(b"HTTP/1.") and b" 400 " in answer.split(b"\r\n")[0]
    assert kubelet(agent.port, "/healthz", cert=cert).status == 200
    assert kubelet(agent.port, base, cert=cert).status == 200
    assert logs(kube, "web").startswith("line 0 of app")
    assert agent.alive()


def test_metrics_on_the_tls_port_and_the_plain_http_port(
    kube: Kube, start_agent: StartAgent, tmp_path: Path
) -> None:
    metrics_port = free_port()
    agent = start_agent(args=[f"--metrics-port={metrics_port}"])
    wait_for("listening", lambda: kubelet_up(agent.port))
    cert = admin_cert(kube.cluster, tmp_path)
    kubelet(agent.port, "/pods", cert=cert)
    secure = kubelet(agent.port, "/metrics", cert=cert)
    assert secure.status == 200
    assert 'vkpy_kubelet_api_requests_total{code="200",route="/pods"}' in secure.text
    connection = http.client.HTTPConnection("127.0.0.1", metrics_port, timeout=10)
    connection.request("GET", "/metrics")
    response = connection.getresponse()
    body = response.read().decode()
    assert response.status == 200
    assert "vkpy_api_requests_total" in body
    assert "vkpy_serving_certificate_expiration_timestamp_seconds" in body
    connection.close()
    assert kubelet(agent.port, "/metrics").text == "Unauthorized"
