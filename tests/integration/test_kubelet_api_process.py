"""The kubelet API with real host processes (process backend) behind it: what a
container prints reaches `kubectl logs` (-f while it runs, ending when it exits;
--previous after a restart; --timestamps, --tail, --limit-bytes, -c), and a busy
process shows non-zero CPU and memory in /stats/summary and /metrics/resource, read
straight from vkpy's port on 127.0.0.1 with the admin's client certificate.
"""

from __future__ import annotations

import json
import re
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.integration.agent import Agent, Kube, wait_for
from tests.integration.conftest import StartAgent
from tests.integration.test_kubelet_api import STAMPED, admin_cert, kubelet

FAST = {
    "runtime": "host",  # host programs on the host's network, as written (modes.py)
    "network": "host",
    "backoff_base_seconds": 1,
    "backoff_max_seconds": 2,
}
# `$$$$` is the shell's `$$` (the run's pid) once Kubernetes has expanded `$$` to `$`.
COUNTER = (
    'i=0; while [ $i -lt {n} ]; do echo "out $$$$ $i"; echo "err $$$$ $i" >&2; '
    "i=$((i+1)); sleep {pause}; done"
)


def pod(
    name: str,
    node: str,
    scripts: dict[str, str],
    restart_policy: str = "Never",
) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name},
        "spec": {
            "nodeName": node,
            "restartPolicy": restart_policy,
            "terminationGracePeriodSeconds": 2,
            "containers": [
                {"name": c, "image": "busybox:1.36", "command": ["sh", "-c", script]}
                for c, script in scripts.items()
            ],
            "tolerations": [{"operator": "Exists"}],
        },
    }


@pytest.fixture
def start_process_agent(kube: Kube, start_agent: StartAgent) -> Iterator[StartAgent]:
    """Start agents on the process backend; their pods are deleted (so their processes
    stop) before the agents do: the backend's processes are meant to outlive vkpy."""

    def start(args: list[str] | None = None) -> Agent:
        return start_agent(provider="process", config=FAST, args=args)

    yield start
    kube.kubectl(
        "delete", "pods", "--all", "-n", kube.namespace, "--timeout=60s", check=False
    )  # fmt: skip


def state(kube: Kube, name: str) -> dict[str, Any]:
    got = kube.get("pod", name) or {}
    statuses = got.get("status", {}).get("containerStatuses") or [{}]
    return dict(statuses[0])


def answered(agent: Agent, path: str, cert: tuple[Path, Path]) -> str:
    """The body of a GET to the agent's kubelet API that must answer 200."""
    reply = kubelet(agent.port, path, cert=cert)
    assert reply.status == 200, (path, reply.status, reply.text)
    return reply.text


def test_kubectl_logs_of_a_real_process(kube: Kube, start_process_agent: StartAgent) -> None:
    agent = start_process_agent()
    script = COUNTER.format(n=8, pause=0.5)
    kube.create(pod("counter", agent.node_name, {"app": script, "side": "echo side; sleep 600"}))
    wait_for("Running", lambda: kube.phase("counter") == "Running")
    argv = kube.cluster.kubectl_argv("logs", "-f", "-n", kube.namespace, "counter", "-c", "app")
    started = time.monotonic()
    follower = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    arrivals: list[tuple[float, str]] = []
    try:
        assert follower.stdout is not None
        for raw in follower.stdout:
            arrivals.append((time.monotonic() - started, raw.decode().rstrip("\n")))
        assert follower.wait(timeout=30) == 0
    finally:
        if follower.poll() is None:
            follower.kill()
    texts = [text for _, text in arrivals]
    pid = texts[0].split()[1]
    assert [t for t in texts if t.startswith("out")] == [f"out {pid} {i}" for i in range(8)]
    assert [t for t in texts if t.startswith("err")] == [f"err {pid} {i}" for i in range(8)]
    assert arrivals[-1][0] - arrivals[0][0] >= 1.5  # lines arrived while it ran
    wait_for("Succeeded", lambda: state(kube, "counter").get("state", {}).get("terminated"))

    logs = kube.kubectl("logs", "-n", kube.namespace, "counter", "-c", "app")
    assert logs.splitlines() == texts
    tail = kube.kubectl("logs", "-n", kube.namespace, "counter", "-c", "app", "--tail=2")
    assert tail.splitlines() == texts[-2:]
    stamped = kube.kubectl("logs", "-n", kube.namespace, "counter", "-c", "app", "--timestamps")
    for raw, text in zip(stamped.encode().splitlines(), texts, strict=True):
        match = STAMPED.match(raw)
        assert match and match[2].decode() == text
    limited = kube.kubectl("logs", "-n", kube.namespace, "counter", "-c", "app", "--limit-bytes=7")
    assert limited == texts[0][:7]
    assert kube.kubectl("logs", "-n", kube.namespace, "counter", "-c", "side") == "side\n"


def test_kubectl_logs_previous_after_a_real_restart(
    kube: Kube, start_process_agent: StartAgent
) -> None:
    agent = start_process_agent()
    script = COUNTER.format(n=3, pause=0.2) + "; exit 1"
    kube.create(pod("crasher", agent.node_name, {"app": script}, restart_policy="Always"))
    wait_for("a restart", lambda: state(kube, "crasher").get("restartCount", 0) >= 1)

    def runs() -> tuple[str, str] | None:
        previous = kube.cluster.run_kubectl(
            "logs", "-n", kube.namespace, "crasher", "--previous", check=False
        )
        current = kube.cluster.run_kubectl("logs", "-n", kube.namespace, "crasher", check=False)
        if previous.returncode or current.returncode or not previous.stdout:
            return None
        return previous.stdout, current.stdout

    previous, current = wait_for("previous and current logs", runs, timeout=30)
    lines = previous.splitlines()
    pid = lines[0].split()[1]
    assert sorted(lines) == sorted(
        [f"out {pid} {i}" for i in range(3)] + [f"err {pid} {i}" for i in range(3)]
    )
    assert current == "" or current.split()[1] != pid or current == previous


def test_busy_process_stats_and_resource_metrics_from_the_kubelet_port(
    kube: Kube, start_process_agent: StartAgent, tmp_path: Path
) -> None:
    # Not through the node proxy: the API server does not proxy to loopback node
    # addresses, and tests may only use loopback.
    agent = start_process_agent()
    busy = "x=0; while :; do x=$((x+1)); done"
    kube.create(pod("busy", agent.node_name, {"spin": busy}))
    wait_for("Running", lambda: kube.phase("busy") == "Running")
    cert = admin_cert(kube.cluster, tmp_path)

    def get(path: str) -> str:
        return answered(agent, path, cert)

    def summary_pod() -> dict[str, Any] | None:
        summary = json.loads(get("/stats/summary"))
        for entry in summary["pods"]:
            if entry["podRef"]["name"] == "busy" and entry["containers"]:
                c = entry["containers"][0]
                if c["cpu"]["usageCoreNanoSeconds"] > 10**8 and c["memory"]["workingSetBytes"]:
                    return dict(entry)
        return None

    entry = wait_for("CPU used by the busy process", summary_pod, timeout=30)
    (spin,) = entry["containers"]
    assert spin["name"] == "spin"
    assert spin["cpu"]["usageNanoCores"] > 10**8  # a spinning shell uses most of a core
    assert spin["memory"]["workingSetBytes"] > 0
    assert entry["memory"]["workingSetBytes"] > 0

    def scrape() -> dict[str, Any]:
        return {f.name: f for f in text_string_to_metric_families(get("/metrics/resource"))}

    labels = {"container": "spin", "pod": "busy", "namespace": kube.namespace}
    first = scrape()
    for name in (
        "container_cpu_usage_seconds",
        "container_memory_working_set_bytes",
        "container_start_time_seconds",
    ):
        (sample,) = [s for s in first[name].samples if s.labels == labels]
        assert sample.value > 0, name
    for name in ("node_cpu_usage_seconds", "node_memory_working_set_bytes"):
        assert first[name].samples[0].value > 0
    time.sleep(1.5)
    second = scrape()

    def cpu(families: dict[str, Any]) -> float:
        (sample,) = [
            s for s in families["container_cpu_usage_seconds"].samples if s.labels == labels
        ]
        return float(sample.value)

    # Cumulative and growing while the process spins (how fast depends on the
    # machine's load, so no more than that is asserted).
    assert cpu(second) - cpu(first) > 0.05
    assert re.fullmatch(r"\d+(\.\d+)?", str(second["node_cpu_usage_seconds"].samples[0].value))


def test_an_idle_process_reports_the_little_cpu_it_used(
    kube: Kube, start_process_agent: StartAgent, tmp_path: Path
) -> None:
    """metrics-server drops a pod whose CPU counter is 0: an idle container (it used a
    few ms to start, less than one 10 ms clock tick) must still report what it used."""
    agent = start_process_agent()
    kube.create(pod("idle", agent.node_name, {"nap": "exec sleep 3600"}))
    wait_for("Running", lambda: kube.phase("idle") == "Running")
    cert = admin_cert(kube.cluster, tmp_path)

    def get(path: str) -> str:
        return answered(agent, path, cert)

    def nap() -> dict[str, Any] | None:
        for entry in json.loads(get("/stats/summary"))["pods"]:
            if entry["podRef"]["name"] == "idle" and entry["containers"]:
                return dict(entry["containers"][0])
        return None

    container = wait_for("stats of the idle pod", nap, timeout=30)
    assert container["name"] == "nap"
    assert container["cpu"]["usageCoreNanoSeconds"] > 0
    families = {f.name: f for f in text_string_to_metric_families(get("/metrics/resource"))}
    labels = {"container": "nap", "pod": "idle", "namespace": kube.namespace}
    (sample,) = [s for s in families["container_cpu_usage_seconds"].samples if s.labels == labels]
    assert sample.value > 0
    assert sample.value < 1  # an idle sleep: milliseconds, not seconds
