"""Helpers for the exec, attach and port-forward tests through the real API server.

kubectl is run as people run it, with the transport chosen the way people choose it:
the default (WebSocket from kubectl to the API server, which speaks SPDY to the
kubelet) or `KUBECTL_REMOTE_COMMAND_WEBSOCKETS=false` /
`KUBECTL_PORT_FORWARD_WEBSOCKETS=false` (SPDY end to end). Interactive sessions run
under a real pseudo-terminal. Leaks are measured on the agent from outside: its open
file descriptors in /proc, and its asyncio task count from its own /metrics (on its
plain-HTTP metrics port: the API server refuses to proxy to a loopback node).
"""

from __future__ import annotations

import base64
import contextlib
import fcntl
import json
import os
import pty
import re
import select
import signal
import struct
import subprocess
import tempfile
import termios
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from tests.integration.agent import Agent, wait_for
from vkpy.devcluster import ClusterAccess
from vkpy.providers.process import namespaces

TRANSPORTS = ("websocket", "spdy")


def kubectl_env(cluster: ClusterAccess, transport: str = "websocket") -> dict[str, str]:
    websockets = "true" if transport == "websocket" else "false"
    return {
        **os.environ,
        **cluster.env(),
        "KUBECTL_REMOTE_COMMAND_WEBSOCKETS": websockets,
        "KUBECTL_PORT_FORWARD_WEBSOCKETS": websockets,
    }


def kubectl(
    cluster: ClusterAccess,
    *args: str,
    transport: str = "websocket",
    input: bytes | None = None,
    timeout: float = 60.0,
) -> subprocess.CompletedProcess[bytes]:
    """Run kubectl (bytes in and out, never raising on its exit code)."""
    return subprocess.run(
        cluster.kubectl_argv(*args),
        input=input,
        capture_output=True,
        timeout=timeout,
        env=kubectl_env(cluster, transport),
        check=False,
    )


def start_kubectl(
    cluster: ClusterAccess, *args: str, transport: str = "websocket", **kwargs: Any
) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        cluster.kubectl_argv(*args), env=kubectl_env(cluster, transport), **kwargs
    )


# --- what the agent holds ------------------------------------------------------------------------


def open_fds(agent: Agent) -> int:
    assert agent.process is not None
    return len(os.listdir(f"/proc/{agent.process.pid}/fd"))


def agent_metric(metrics_port: int, name: str) -> float:
    """One unlabelled sample of the agent's own /metrics (its plain-HTTP metrics port)."""
    with urllib.request.urlopen(f"http://127.0.0.1:{metrics_port}/metrics", timeout=30) as got:
        text = got.read().decode()
    match = re.search(rf"^{re.escape(name)} (\S+)$", text, re.MULTILINE)
    assert match is not None, f"no {name} in the agent's metrics"
    return float(match.group(1))


@dataclass
class Footprint:
    """An agent's open file descriptors and asyncio tasks at one moment."""

    fds: int
    tasks: float

    @classmethod
    def of(cls, agent: Agent, metrics_port: int) -> Footprint:
        tasks = agent_metric(metrics_port, "vkpy_asyncio_tasks")
        return cls(open_fds(agent), tasks)

    def assert_back(self, agent: Agent, metrics_port: int, timeout: float = 20.0) -> None:
        """Wait until the agent holds no more than it did (a little slack for the
        metrics connection itself)."""

        def settled() -> Footprint | None:
            now = Footprint.of(agent, metrics_port)
            return now if now.fds <= self.fds + 1 and now.tasks <= self.tasks + 1 else None

        try:
            wait_for("the agent to release the sessions", settled, timeout=timeout, interval=0.5)
        except AssertionError:
            now = Footprint.of(agent, metrics_port)
            raise AssertionError(f"before {self}, now {now}") from None


# --- an interactive terminal ---------------------------------------------------------------------


class Terminal:
    """A program under a pseudo-terminal, driven like a person at a keyboard."""

    def __init__(
        self, argv: list[str], env: dict[str, str], rows: int = 24, cols: int = 80
    ) -> None:
        pid, fd = pty.fork()
        if pid == 0:  # pragma: no cover - the child
            try:
                os.execvpe(argv[0], argv, env)
            finally:
                os._exit(127)
        self.pid = pid
        self.fd = fd
        self.buffer = b""
        self.resize(rows, cols)

    def resize(self, rows: int, cols: int) -> None:
        fcntl.ioctl(self.fd, termios.TIOCSWINSZ, struct.pack("HHHH", rows, cols, 0, 0))
        with contextlib.suppress(ProcessLookupError):
            os.kill(self.pid, signal.SIGWINCH)

    def send(self, text: str) -> None:
        os.write(self.fd, text.encode())

    def expect(self, pattern: str, timeout: float = 20.0) -> str:
        """Read until `pattern` (a regex) shows; return everything up to its end."""
        deadline = time.monotonic() + timeout
        regex = re.compile(pattern.encode())
        while True:
            match = regex.search(self.buffer)
            if match:
                out, self.buffer = self.buffer[: match.end()], self.buffer[match.end() :]
                return out.decode(errors="replace")
            left = deadline - time.monotonic()
            if left <= 0:
                raise AssertionError(f"no {pattern!r} in {self.buffer!r}")
            ready, _, _ = select.select([self.fd], [], [], left)
            if ready:
                try:
                    chunk = os.read(self.fd, 4096)
                except OSError:
                    chunk = b""
                if not chunk:
                    raise AssertionError(f"terminal closed; no {pattern!r} in {self.buffer!r}")
                self.buffer += chunk

    def wait(self, timeout: float = 20.0) -> int:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            with contextlib.suppress(OSError):
                ready, _, _ = select.select([self.fd], [], [], 0.1)
                if ready:
                    self.buffer += os.read(self.fd, 4096)
            pid, status = os.waitpid(self.pid, os.WNOHANG)
            if pid:
                os.close(self.fd)
                return os.waitstatus_to_exitcode(status)
        raise AssertionError(f"still running; output {self.buffer!r}")

    def kill(self) -> None:
        with contextlib.suppress(ProcessLookupError, ChildProcessError):
            os.kill(self.pid, signal.SIGKILL)
            os.waitpid(self.pid, 0)
        with contextlib.suppress(OSError):
            os.close(self.fd)


# --- straight to the kubelet ---------------------------------------------------------------------


@contextlib.contextmanager
def client_certificate(cluster: ClusterAccess) -> Iterator[tuple[str, str]]:
    """The kubeconfig's client certificate and key as files (the cluster CA signed them,
    and the kubelet trusts that CA for clients)."""
    config = yaml.safe_load(Path(cluster.kubeconfig).read_text())
    user = config["users"][0]["user"]
    with tempfile.TemporaryDirectory() as tmp:
        paths = []
        for kind in ("client-certificate", "client-key"):
            path = Path(tmp) / kind
            if f"{kind}-data" in user:
                path.write_bytes(base64.b64decode(user[f"{kind}-data"]))
            else:
                path.write_bytes(Path(user[kind]).read_bytes())
            paths.append(str(path))
        yield paths[0], paths[1]


def kill_leftover_processes(state_dir: Path) -> None:
    """Containers of the process backend outlive vkpy by design: end those of a test."""
    for pod in state_dir.glob("process/pods/*/"):
        namespaces.stop(pod)  # the pod's namespace holder, if it has one
    for run_file in state_dir.glob("process/pods/*/containers/*/instances/*/run.json"):
        with contextlib.suppress(OSError, ValueError, KeyError):
            run = json.loads(run_file.read_text())
            for pid in (run["supervisor_pid"], run["pid"]):
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.killpg(pid, signal.SIGKILL)


def wait_running(kube: Any, name: str, timeout: float = 60.0) -> dict[str, Any]:
    def running() -> dict[str, Any] | None:
        pod = kube.get("pod", name)
        if not pod or pod.get("status", {}).get("phase") != "Running":
            return None
        statuses = pod["status"].get("containerStatuses") or []
        return pod if statuses and all("running" in s["state"] for s in statuses) else None

    result: dict[str, Any] = wait_for(f"pod {name} running", running, timeout=timeout)
    return result
