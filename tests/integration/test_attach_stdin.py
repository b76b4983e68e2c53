"""`kubectl run --attach` ends as it does on a kubelet, with and without `stdinOnce`.

A container runtime ties the end of the client's stdin to the container in two ways
(the `[sig-cli] Kubectl client Simple pod should support inline execution and attach`
spec runs all three below on busybox):

- `stdinOnce: true` (`kubectl run -i`): when the first attach session's stdin ends,
  the container's stdin is closed (the process reads end of file) and the session
  goes on until the process ends, so kubectl prints everything it wrote after;
- `stdin: true` without `stdinOnce` (`--leave-stdin-open`): the end of the client's
  stdin ends the session, the container's stdin stays open and the process runs on;
- no `stdin`: the process reads nothing (end of file at once).
"""

from __future__ import annotations

import json

import pytest

from tests.integration.agent import Agent, Kube, wait_for
from tests.integration.conftest import StartAgent
from tests.integration.stream_helpers import TRANSPORTS, kill_leftover_processes, kubectl
from vkpy.devcluster import ClusterAccess

READ_THEN_CAT = "echo -n read: && cat && echo 'stdin closed'"


@pytest.fixture
def process_node(start_agent: StartAgent) -> Agent:
    agent = start_agent(provider="process", config={"runtime": "host", "network": "host"})
    try:
        yield agent
    finally:
        agent.stop()
        kill_leftover_processes(agent.state_dir)


def run_attached(
    cluster: ClusterAccess,
    namespace: str,
    node: str,
    name: str,
    *flags: str,
    script: str,
    input: bytes,
    transport: str,
) -> tuple[int, str, str]:
    overrides = json.dumps({"apiVersion": "v1", "spec": {"nodeName": node}})
    got = kubectl(
        cluster,
        *("run", name, "-n", namespace, "--image=busybox", "--attach=true"),
        *flags,
        f"--overrides={overrides}",
        "--pod-running-timeout=2m",
        *("--", "sh", "-c", script),
        transport=transport,
        input=input,
        timeout=120,
    )
    return got.returncode, got.stdout.decode(), got.stderr.decode()


def pod_log(kube: Kube, name: str) -> str:
    return kube.kubectl("logs", "-n", kube.namespace, name)


@pytest.mark.parametrize("transport", TRANSPORTS)
def test_stdin_once_closes_the_containers_stdin_when_the_client_ends(
    cluster: ClusterAccess, kube: Kube, process_node: Agent, namespace: str, transport: str
) -> None:
    code, out, err = run_attached(
        cluster, namespace, process_node.node_name, "once", "--stdin", "--restart=Never",
        script=READ_THEN_CAT, input=b"value\nabcd1234", transport=transport,
    )  # fmt: skip
    assert code == 0, err
    assert "abcd1234" in out and "stdin closed" in out, out
    log = pod_log(kube, "once")
    assert "read:value" in log and "abcd1234" in log and "stdin closed" in log, log
    assert kube.phase("once") == "Succeeded"


@pytest.mark.parametrize("transport", TRANSPORTS)
def test_without_stdin_once_the_session_ends_with_the_clients_stdin(
    cluster: ClusterAccess, kube: Kube, process_node: Agent, namespace: str, transport: str
) -> None:
    code, _, err = run_attached(
        cluster, namespace, process_node.node_name, "open", "--stdin", "--leave-stdin-open=true",
        "--restart=OnFailure", script="cat && echo 'stdin closed'", input=b"abcd1234\n",
        transport=transport,
    )  # fmt: skip
    assert code == 0, err
    wait_for("the line in the log", lambda: "abcd1234" in pod_log(kube, "open") or None)
    assert "stdin closed" not in pod_log(kube, "open")
    assert kube.phase("open") == "Running"


def test_without_stdin_the_process_reads_end_of_file(
    cluster: ClusterAccess, kube: Kube, process_node: Agent, namespace: str
) -> None:
    code, _, err = run_attached(
        cluster, namespace, process_node.node_name, "nostdin", "--leave-stdin-open=true",
        "--restart=OnFailure", script="sleep 2; cat && echo 'stdin closed'", input=b"abcd1234",
        transport="websocket",
    )  # fmt: skip
    assert code == 0, err
    wait_for("the end of cat", lambda: "stdin closed" in pod_log(kube, "nostdin") or None)
    assert "abcd1234" not in pod_log(kube, "nostdin")
