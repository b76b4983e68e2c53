"""`kubectl logs` of process-backend pods through the real API server, and their stats
straight from the kubelet port on 127.0.0.1.

The logs are what real processes wrote, read back from the supervisor's CRI-format
files by the backend and served by the kubelet API; the stats are sampled from the
containers' cgroups or /proc.
"""

# ruff: noqa: F811 - pytest fixtures are imported by name and then requested as arguments
from __future__ import annotations

import asyncio
import json
import re
import ssl
import subprocess
import time
from pathlib import Path
from typing import Any

import aiohttp
import yaml

from tests.integration.agent import Kube, wait_for
from tests.integration.process_fixtures import (  # noqa: F401 - fixtures
    StartProcessAgent,
    phase_is,
    process_pod,
    start_process_agent,
    status_of,
)
from tests.integration.stream_helpers import client_certificate
from tests.integration.test_kubelet_api import admin_cert, kubelet
from vkpy.app.cli import DEFAULT_PROVIDER

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "hello.yaml"
STAMPED = re.compile(r"^(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{9}Z) (.*)$")


def logs(kube: Kube, *args: str) -> str:
    return kube.kubectl("logs", "-n", kube.namespace, *args)


def test_kubectl_logs_streams_tail_timestamps_and_previous(
    kube: Kube, start_process_agent: StartProcessAgent
) -> None:
    agent = start_process_agent()
    script = """
        run=$(cat out/runs 2>/dev/null || echo 0); echo $((run + 1)) > out/runs
        for n in 1 2 3; do echo "run $run line $n"; echo "run $run oops $n" >&2; done
        [ "$run" -ge 1 ] && exec sleep 3600
        exit 1
    """
    kube.create(
        process_pod(
            "talker",
            agent.node_name,
            script,
            "OnFailure",
            container={"volumeMounts": [{"name": "out", "mountPath": "/out"}]},
            volumes=[{"name": "out", "emptyDir": {}}],
        )
    )
    wait_for(
        "the second run",
        lambda: (
            (p := phase_is(kube, "talker", "Running"))
            and status_of(p).get("restartCount") == 1
            and "running" in status_of(p)["state"]
        ),
        timeout=60,
    )
    current = wait_for("6 lines", lambda: (t := logs(kube, "talker")).count("\n") == 6 and t)
    assert sorted(current.splitlines()) == sorted(
        [f"run 1 line {n}" for n in (1, 2, 3)] + [f"run 1 oops {n}" for n in (1, 2, 3)]
    )
    lines = current.splitlines()
    assert [x for x in lines if "line" in x] == [f"run 1 line {n}" for n in (1, 2, 3)]
    previous = logs(kube, "talker", "--previous").splitlines()
    assert sorted(previous) == sorted(
        [f"run 0 line {n}" for n in (1, 2, 3)] + [f"run 0 oops {n}" for n in (1, 2, 3)]
    )
    assert logs(kube, "talker", "--tail=2").splitlines() == lines[-2:]
    stamped = logs(kube, "talker", "--timestamps").splitlines()
    assert [STAMPED.match(s)[2] for s in stamped] == lines  # type: ignore[index]


def logs_over_websocket(kube: Kube, pod: str) -> bytes:
    """The pod's log as the upstream e2e suite reads it: a websocket to the API server
    (protocol binary.k8s.io), every message until the server closes."""
    server = yaml.safe_load(Path(kube.cluster.kubeconfig).read_text())["clusters"][0]["cluster"]
    context = ssl.create_default_context()
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE
    with client_certificate(kube.cluster) as (cert, key):
        context.load_cert_chain(cert, key)
    url = f"{server['server']}/api/v1/namespaces/{kube.namespace}/pods/{pod}/log?container=app"

    async def read() -> bytes:
        received = b""
        async with aiohttp.ClientSession() as http:
            async with http.ws_connect(url, protocols=["binary.k8s.io"], ssl=context) as ws:
                async for message in ws:
                    received += message.data
        return received

    return asyncio.run(read())


def test_logs_over_a_websocket_through_the_api_server(
    kube: Kube, start_process_agent: StartProcessAgent
) -> None:
    """The conformance spec "retrieving logs from the container over websockets": the API
    server's websocket copier drops the bytes of a read that also returns EOF, which a
    Content-Length answer of the kubelet API gives it; the kubelet streams its answer."""
    agent = start_process_agent()
    kube.create(process_pod("ws", agent.node_name, "echo container is alive; sleep 3600"))
    wait_for("ws Running", lambda: phase_is(kube, "ws", "Running"), timeout=60)
    wait_for("its line logged", lambda: logs(kube, "ws") == "container is alive\n", timeout=30)
    assert logs_over_websocket(kube, "ws") == b"container is alive\n"


def test_kubectl_logs_follow_ends_with_the_container(
    kube: Kube, start_process_agent: StartProcessAgent
) -> None:
    agent = start_process_agent()
    kube.create(
        process_pod("ticker", agent.node_name, "for n in 1 2 3 4; do echo tick $n; sleep 1; done")
    )
    wait_for("Running", lambda: phase_is(kube, "ticker", "Running"))
    argv = kube.cluster.kubectl_argv("logs", "-f", "-n", kube.namespace, "ticker")
    started = time.monotonic()
    follower = subprocess.run(argv, capture_output=True, text=True, timeout=30, check=True)
    assert follower.stdout.splitlines()[-1] == "tick 4"
    assert time.monotonic() - started < 15
    wait_for("Succeeded", lambda: phase_is(kube, "ticker", "Succeeded"))


def test_stats_summary_from_the_kubelet_port_has_the_containers_cpu_and_memory(
    kube: Kube, start_process_agent: StartProcessAgent, tmp_path: Path
) -> None:
    # Not through the node proxy: the API server does not proxy to loopback node
    # addresses, and tests may only use loopback.
    agent = start_process_agent()
    burn = "python3 -c 'x = bytearray(48 << 20)\nwhile True: pass'"
    kube.create(process_pod("busy", agent.node_name, burn))
    wait_for("Running", lambda: phase_is(kube, "busy", "Running"))
    cert = admin_cert(kube.cluster, tmp_path)

    def sample() -> dict[str, Any] | None:
        reply = kubelet(agent.port, "/stats/summary", cert=cert)
        assert reply.status == 200, (reply.status, reply.text)
        summary = json.loads(reply.body)
        for pod in summary["pods"]:
            if pod["podRef"]["name"] == "busy" and pod["containers"]:
                app = pod["containers"][0]
                if app["cpu"]["usageCoreNanoSeconds"] > 5e8:
                    return dict(app)
        return None

    app = wait_for("half a CPU second used", sample, timeout=30)
    assert app["name"] == "app"
    assert app["memory"]["workingSetBytes"] >= 40 * 2**20
    assert app["memory"]["rssBytes"] >= 40 * 2**20
    later = wait_for("more CPU time", lambda: (s := sample()) and s, timeout=30)
    assert later["cpu"]["usageCoreNanoSeconds"] >= app["cpu"]["usageCoreNanoSeconds"]


def test_the_hello_example_runs_and_logs(
    kube: Kube, start_process_agent: StartProcessAgent
) -> None:
    agent = start_process_agent()
    manifest = yaml.safe_load(EXAMPLE.read_text())
    manifest["spec"]["nodeName"] = agent.node_name  # not any other virtual node
    kube.create(manifest)
    wait_for("Running", lambda: phase_is(kube, "hello", "Running"))
    first = wait_for("a greeting", lambda: logs(kube, "hello").splitlines())
    assert first[0] == "hello from hello"


def test_process_is_the_default_backend() -> None:
    assert DEFAULT_PROVIDER == "process"
