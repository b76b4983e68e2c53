"""`kubectl exec` on Fargate pods through ECS Exec, end to end: the pinned kubectl and
API server, `python -m vkpy --provider fargate` against moto (tasks) and the strict
local Session Manager endpoint (ExecuteCommand and the data channel, the session's
command a real program on a pseudo-terminal), over both WebSocket and SPDY.
"""
# ruff: noqa: F811 - pytest fixtures are imported by name and then requested as arguments

from __future__ import annotations

import hashlib
import os
import subprocess
import time
from typing import Any

import pytest
import yaml

from tests.integration.agent import Agent, Kube, wait_for
from tests.integration.aws_fixtures import (  # noqa: F401 - fixtures
    FargateSetup,
    aws,
    aws_proxy,
    fargate_setup,
    moto,
    ssm_endpoint,
)
from tests.integration.conftest import StartAgent
from tests.integration.moto_server import Aws
from tests.integration.ssm_endpoint import SsmEndpoint
from tests.integration.stream_helpers import TRANSPORTS, Terminal, kubectl_env
from tests.integration.test_aws_agent import aws_pod, phase_is

PROMPT = r"# $"


def fargate_pod(kube: Kube, agent: Agent, name: str = "box") -> dict[str, Any]:
    manifest = aws_pod(name, agent.node_name, terminationGracePeriodSeconds=2)
    manifest["spec"]["containers"] = [
        {
            "name": "app",
            "image": "public.ecr.aws/docker/library/busybox:1.36",
            "command": ["sleep", "3600"],
            "resources": {"requests": {"cpu": "250m", "memory": "512Mi"}},
        }
    ]
    kube.create(manifest)
    running: dict[str, Any] = wait_for("Running", phase_is(kube, name, "Running"), timeout=60)
    return running


def start(start_agent: StartAgent, setup: FargateSetup, exec_on: bool = True) -> Agent:
    return start_agent(provider="fargate", config=setup.config(enable_execute_command=exec_on))


def kubectl(
    kube: Kube, transport: str, *args: str, stdin: bytes | None = None
) -> subprocess.CompletedProcess[bytes]:
    argv = kube.cluster.kubectl_argv(*args)
    return subprocess.run(
        argv,
        input=stdin,
        capture_output=True,
        env=kubectl_env(kube.cluster, transport),
        timeout=120,
        check=False,
    )


@pytest.mark.parametrize("transport", TRANSPORTS)
def test_kubectl_exec_output_stdin_and_exit_codes(
    kube: Kube,
    start_agent: StartAgent,
    fargate_setup: FargateSetup,
    ssm_endpoint: SsmEndpoint,
    transport: str,
) -> None:
    agent = start(start_agent, fargate_setup)
    fargate_pod(kube, agent)
    ns = kube.namespace

    hi = kubectl(kube, transport, "exec", "-n", ns, "box", "--", "echo", "hi")
    assert (hi.returncode, hi.stdout) == (0, b"hi\n"), hi.stderr

    failed = kubectl(kube, transport, "exec", "-n", ns, "box", "--", "sh", "-c", "exit 3")
    assert failed.returncode == 3
    assert b"command terminated with exit code 3" in failed.stderr

    payload = os.urandom(5 * 1024 * 1024)
    started = time.monotonic()
    summed = kubectl(
        kube, transport, "exec", "-i", "-n", ns, "box", "--", "sha256sum", stdin=payload
    )
    took = time.monotonic() - started
    assert summed.returncode == 0, summed.stderr
    assert summed.stdout == f"{hashlib.sha256(payload).hexdigest()}  -\n".encode()
    print(f"5 MB through sha256sum over ECS Exec ({transport}): {took:.1f} s")


@pytest.mark.parametrize("transport", TRANSPORTS)
def test_kubectl_exec_it_shell_prompt_and_resize(
    kube: Kube,
    start_agent: StartAgent,
    fargate_setup: FargateSetup,
    ssm_endpoint: SsmEndpoint,
    transport: str,
) -> None:
    agent = start(start_agent, fargate_setup)
    fargate_pod(kube, agent)
    argv = kube.cluster.kubectl_argv("exec", "-it", "-n", kube.namespace, "box", "--", "sh")
    terminal = Terminal(argv, kubectl_env(kube.cluster, transport), rows=30, cols=100)
    try:
        terminal.expect(PROMPT)
        terminal.send("echo hello\r")
        assert "\r\nhello\r\n" in terminal.expect(PROMPT)
        terminal.send("stty size\r")
        assert "\r\n30 100\r\n" in terminal.expect(PROMPT)
        terminal.resize(40, 132)
        for _ in range(20):  # the size travels on its own stream: ask until it shows
            terminal.send("stty size\r")
            if "40 132" in terminal.expect(PROMPT):
                break
            time.sleep(0.25)
        else:
            raise AssertionError("the resize never reached the shell")
        terminal.send("exit 3\r")
        assert terminal.wait() == 3
        assert b"\x1e" not in terminal.buffer
    finally:
        terminal.kill()


def test_kubectl_exec_survives_a_bad_digest_and_a_dropped_connection(
    kube: Kube,
    start_agent: StartAgent,
    fargate_setup: FargateSetup,
    ssm_endpoint: SsmEndpoint,
) -> None:
    agent = start(start_agent, fargate_setup)
    fargate_pod(kube, agent)
    ssm_endpoint.corrupt_next_output = True
    ssm_endpoint.drop_after_input = 200
    payload = os.urandom(1024 * 1024)
    summed = kubectl(
        kube,
        "websocket",
        "exec",
        "-i",
        "-n",
        kube.namespace,
        "box",
        "--",
        "sha256sum",
        stdin=payload,
    )
    assert summed.returncode == 0, summed.stderr
    assert summed.stdout == f"{hashlib.sha256(payload).hexdigest()}  -\n".encode()
    assert (ssm_endpoint.corrupted, ssm_endpoint.drops) == (1, 1)
    assert ssm_endpoint.session().connections == 2


def test_kubectl_exec_errors_say_what_to_do(
    kube: Kube,
    start_agent: StartAgent,
    fargate_setup: FargateSetup,
    ssm_endpoint: SsmEndpoint,
    aws: Aws,
) -> None:
    ns = kube.namespace
    agent = start(start_agent, fargate_setup, exec_on=False)
    fargate_pod(kube, agent)

    off = kubectl(kube, "websocket", "exec", "-n", ns, "box", "--", "true")
    assert off.returncode != 0
    assert b"enable_execute_command: true" in off.stderr

    # exec turned on in the node's config: the running task was launched without it
    agent.stop()
    assert agent.provider_config is not None
    agent.provider_config.write_text(
        yaml.safe_dump(fargate_setup.config(enable_execute_command=True))
    )
    agent.start()
    wait_for(
        "the restarted agent to answer exec",
        lambda: (
            b"started without ECS Exec"
            in kubectl(kube, "websocket", "exec", "-n", ns, "box", "--", "true").stderr
        ),
        timeout=60,
        interval=1,
    )

    fargate_pod(kube, agent, "second")
    ssm_endpoint.denied = True
    denied = kubectl(kube, "spdy", "exec", "-n", ns, "second", "--", "true")
    assert denied.returncode != 0
    assert b"needs ecs:ExecuteCommand" in denied.stderr
    ssm_endpoint.denied = False

    ssm_endpoint.drop_after_input = 5
    ssm_endpoint.expire_on_drop = True
    expired = kubectl(
        kube, "websocket", "exec", "-i", "-n", ns, "second", "--", "cat", stdin=b"x" * 200_000
    )
    assert expired.returncode != 0
    assert b"expired" in expired.stderr

    unknown = kubectl(
        kube, "spdy", "exec", "-n", ns, "second", "--", "sh", "-c", "echo partial; kill -9 $PPID"
    )
    assert unknown.returncode != 0  # never a made-up 0
    assert unknown.stdout == b"partial\n"
    assert b"exit code is unknown" in unknown.stderr

    attach = kubectl(kube, "websocket", "attach", "-n", ns, "second")
    assert attach.returncode != 0
    assert b"cannot connect to the container's main process" in attach.stderr

    # A node polling every 0.5 s reports the stopped task at once, and kubectl then
    # refuses a completed pod itself: one that polls rarely answers the exec first.
    agent.stop()
    agent.provider_config.write_text(
        yaml.safe_dump(fargate_setup.config(enable_execute_command=True, poll_interval=3600))
    )
    agent.start()
    wait_for(
        "the restarted agent to run exec",
        lambda: (
            kubectl(kube, "websocket", "exec", "-n", ns, "second", "--", "true").returncode == 0
        ),
        timeout=60,
        interval=1,
    )
    tasks = aws("ecs", "list_tasks", cluster=fargate_setup.cluster)["taskArns"]
    for arn in tasks:
        aws("ecs", "stop_task", cluster=fargate_setup.cluster, task=arn)
    stopping = kubectl(kube, "websocket", "exec", "-n", ns, "second", "--", "true")
    assert stopping.returncode != 0
    assert b"ECS task is" in stopping.stderr, stopping.stderr
