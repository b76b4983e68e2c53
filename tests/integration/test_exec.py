"""`kubectl exec` through the real API server, on the sim and the process backends.

Both transports a user gets: the default (kubectl speaks WebSocket to the API server,
which speaks SPDY to the kubelet) and SPDY end to end
(KUBECTL_REMOTE_COMMAND_WEBSOCKETS=false). Exact output, exit codes, stderr kept
apart, 10 MB through stdin, 20 sessions at once, and a kubectl killed mid-stream:
the command in the pod ends and the agent is left holding nothing.
"""

# ruff: noqa: F811 - pytest fixtures are imported by name and then requested as arguments
from __future__ import annotations

import hashlib
import os
import re
import subprocess
import time
from concurrent.futures import ThreadPoolExecutor

import pytest

from tests.integration.agent import wait_for
from tests.integration.stream_fixtures import Box, process_box, sim_box  # noqa: F401
from tests.integration.stream_helpers import (
    TRANSPORTS,
    kubectl,
    start_kubectl,
)
from vkpy.devcluster import ClusterAccess


def check_exec_basics(cluster: ClusterAccess, box: Box, transport: str, ns: str) -> None:
    def run(*args: str, stdin: bytes | None = None) -> tuple[int, bytes, bytes]:
        got = kubectl(cluster, "exec", "-n", ns, *args, transport=transport, input=stdin)
        return got.returncode, got.stdout, got.stderr

    assert run(box.pod, "-c", "app", "--", "echo", "hi") == (0, b"hi\n", b"")
    code, out, err = run(box.pod, "-c", "app", "--", "sh", "-c", "exit 7")
    assert (code, out) == (7, b"")
    assert b"command terminated with exit code 7" in err
    code, out, err = run(box.pod, "-c", "app", "--", "sh", "-c", "echo to-out; echo to-err >&2")
    assert (code, out) == (0, b"to-out\n")
    assert err == b"to-err\n"
    code, out, _ = run(box.pod, "-c", "app", "--", "sh", "-c", "echo $GREETING")
    assert code == 0
    if box.backend == "process":
        assert out == b"hello from the pod\n"
    payload = os.urandom(10 * 1024 * 1024)
    code, out, err = run("-i", box.pod, "-c", "app", "--", "sha256sum", stdin=payload)
    assert code == 0, err
    assert out.split()[0].decode() == hashlib.sha256(payload).hexdigest()


@pytest.mark.parametrize("transport", TRANSPORTS)
def test_exec_on_sim(cluster: ClusterAccess, sim_box: Box, namespace: str, transport: str) -> None:
    check_exec_basics(cluster, sim_box, transport, namespace)


@pytest.mark.parametrize("transport", TRANSPORTS)
def test_exec_on_process(
    cluster: ClusterAccess, process_box: Box, namespace: str, transport: str
) -> None:
    check_exec_basics(cluster, process_box, transport, namespace)
    got = kubectl(
        cluster,
        "exec",
        "-n",
        namespace,
        "box",
        "-c",
        "app",
        "--",
        "sh",
        "-c",
        "id -u; pwd; test -t 0 && echo tty || echo no-tty",
        transport=transport,
    )
    user, cwd, tty = got.stdout.decode().split("\n")[:3]
    if os.geteuid() == 0:  # the pod's own user, from the default pod_uid_range
        assert 200000 <= int(user) <= 265535
    else:
        assert int(user) == os.geteuid()
    assert cwd.endswith("/containers/app/root")
    assert tty == "no-tty"
    missing = kubectl(cluster, "exec", "-n", namespace, "box", "--", "no-such-command")
    assert missing.returncode == 127
    assert b"no-such-command" in missing.stderr


def test_twenty_concurrent_sessions(cluster: ClusterAccess, sim_box: Box, namespace: str) -> None:
    before = sim_box.footprint()

    def one(i: int) -> tuple[int, bytes]:
        text = f"session {i}\n".encode() * 2000
        got = kubectl(
            cluster, "exec", "-i", "-n", namespace, "box", "--", "cat", input=text, timeout=120
        )
        return got.returncode, got.stdout

    with ThreadPoolExecutor(20) as pool:
        results = list(pool.map(one, range(20)))
    assert results == [(0, f"session {i}\n".encode() * 2000) for i in range(20)]
    sim_box.assert_released(before)


def _running_sleeps(marker: str) -> list[int]:
    pids = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/cmdline", "rb") as handle:
                argv = handle.read().split(b"\0")
        except OSError:
            continue
        if argv[:2] == [b"sleep", marker.encode()]:
            pids.append(int(entry))
    return pids


@pytest.mark.parametrize("transport", TRANSPORTS)
def test_killed_client_ends_the_command(
    cluster: ClusterAccess, process_box: Box, namespace: str, transport: str
) -> None:
    agent = process_box.agent
    before = process_box.footprint()
    marker = f"{os.getpid() % 1000}{time.monotonic_ns() % 100000}"
    client = start_kubectl(
        cluster,
        "exec",
        "-i",
        "-n",
        namespace,
        "box",
        "--",
        "sleep",
        marker,
        transport=transport,
        stdin=subprocess.PIPE,
    )
    pids = wait_for("the command to run in the pod", lambda: _running_sleeps(marker))
    during = process_box.footprint()
    assert during.fds > before.fds  # the session's connection (and pipes) are open
    client.kill()
    client.wait()
    wait_for("the command to end", lambda: not _running_sleeps(marker), timeout=20)
    # An ended process stays in /proc as a zombie until its parent reaps it: wait for
    # that too, so the check is that it is gone for good, not only that it stopped.
    wait_for(
        "the command to be reaped",
        lambda: not any(os.path.exists(f"/proc/{pid}") for pid in pids),
        timeout=20,
    )
    process_box.assert_released(before)
    log = agent.logs()
    assert re.search(r'"exec session ended".*outcome="client_gone"', log), log[-3000:]


def test_exec_with_a_very_long_command_line(
    cluster: ClusterAccess, process_box: Box, namespace: str
) -> None:
    """A 20,000-character argument (the `[sig-cli] Kubectl client Simple pod should
    support exec` spec) travels in the exec request's URL: a kubelet takes request
    lines up to its 1 MiB header limit."""
    long = "a" * 20000
    got = kubectl(cluster, "exec", "-n", namespace, "box", "-c", "app", "--", "echo", long)
    assert got.returncode == 0, got.stderr
    assert got.stdout == long.encode() + b"\n"
