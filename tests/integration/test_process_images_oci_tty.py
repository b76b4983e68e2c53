"""A terminal in `runtime: oci` pods: `kubectl exec -it` and `kubectl attach -it` (on a
`tty: true, stdin: true` container) under a real pseudo-terminal, as a person types:
the shell (busybox's, from the image, run by runc) is on a terminal of the
container's own (/dev/pts/N of its devpts), `stty size` follows the client's window
as it is resized, and the session's end is the client's exit status."""

# ruff: noqa: F811 - pytest fixtures are imported by name and then requested as arguments
from __future__ import annotations

import time
from pathlib import Path

import pytest

from tests.integration.agent import Kube, wait_for
from tests.integration.oci_fixtures import (  # noqa: F401 - registry: a fixture
    ROOT_ONLY,
    busybox_pod,
    oci_config,
    registry,
)
from tests.integration.process_fixtures import (  # noqa: F401 - fixtures
    StartProcessAgent,
    reachable_pods_dir,
    start_process_agent,
)
from tests.integration.stream_helpers import TRANSPORTS, Terminal, kubectl_env
from tests.registry import Registry

pytestmark = ROOT_ONLY

PROMPT = r"[$#] (\x1b\[[0-9;]*[A-Za-z])*$"
"""busybox's prompt, and the terminal controls its line editing writes after it: it asks
where the cursor is (ESC [6n), and on a window change (SIGWINCH, which may come at any
moment after the attach) draws the prompt again and clears the rest of the line (ESC [J)."""


def answer(terminal: Terminal, command: str, output: str) -> str:
    """Type `command` and wait for a line matching `output` (a regex), then a prompt:
    a prompt drawn again meanwhile is not taken for the command's end."""
    terminal.send(f"{command}\r")
    return terminal.expect(rf"(?s)\r\n{output}\r\n.*?{PROMPT}")


def follows_the_window(terminal: Terminal) -> None:
    """`tty` names a pseudo-terminal; `stty size` is the client's, then its new size."""
    answer(terminal, "tty", r"/dev/pts/\d+")
    answer(terminal, "stty size", "30 100")
    terminal.resize(40, 132)
    # The new size travels on a stream of its own: ask until it shows.
    out = ""
    for _ in range(20):
        out = answer(terminal, "stty size", r"\d+ \d+")
        if "\r\n40 132\r\n" in out:
            break
        time.sleep(0.25)
    assert "\r\n40 132\r\n" in out


@pytest.mark.parametrize("transport", TRANSPORTS)
def test_kubectl_exec_it_gets_a_terminal_in_an_oci_container(
    kube: Kube,
    start_process_agent: StartProcessAgent,
    registry: Registry,
    reachable_pods_dir: Path,
    transport: str,
) -> None:
    agent = start_process_agent(oci_config(registry, reachable_pods_dir))
    image = f"{registry.host}/library/busybox:latest"
    kube.create(busybox_pod("term", agent.node_name, image, command=["sleep", "3600"]))
    wait_for("term Running", lambda: kube.phase("term") == "Running", timeout=60)
    cluster = kube.cluster
    argv = cluster.kubectl_argv("exec", "-it", "-n", kube.namespace, "term", "--", "sh")
    terminal = Terminal(argv, kubectl_env(cluster, transport), rows=30, cols=100)
    try:
        terminal.expect(PROMPT)
        answer(terminal, "id -u", "0")
        follows_the_window(terminal)
        terminal.send("exit 3\r")
        assert terminal.wait() == 3
    finally:
        terminal.kill()
    kube.kubectl("-n", kube.namespace, "delete", "pod", "term", "--wait=true")


def test_kubectl_attach_it_gets_the_containers_terminal(
    kube: Kube,
    start_process_agent: StartProcessAgent,
    registry: Registry,
    reachable_pods_dir: Path,
) -> None:
    agent = start_process_agent(oci_config(registry, reachable_pods_dir))
    image = f"{registry.host}/library/busybox:latest"
    kube.create(busybox_pod("shell", agent.node_name, image, command=["sh"], stdin=True, tty=True))
    wait_for("shell Running", lambda: kube.phase("shell") == "Running", timeout=60)
    cluster = kube.cluster
    argv = cluster.kubectl_argv("attach", "-it", "-n", kube.namespace, "shell", "-c", "app")
    terminal = Terminal(argv, kubectl_env(cluster), rows=30, cols=100)
    try:
        terminal.send("\r")  # the prompt was printed before the attach: a new one
        terminal.expect(PROMPT)
        follows_the_window(terminal)
        answer(terminal, "echo from-the-terminal", "from-the-terminal")
        terminal.send("exit 0\r")
        terminal.wait()
    finally:
        terminal.kill()

    def terminated() -> dict[str, object] | None:
        pod = kube.get("pod", "shell") or {}
        for status in pod.get("status", {}).get("containerStatuses") or []:
            return status.get("state", {}).get("terminated")  # type: ignore[no-any-return]
        return None

    # The shell the terminal drove was the container's own process.
    ended = wait_for("the shell to end", terminated, timeout=30)
    assert ended["exitCode"] == 0
    kube.kubectl("-n", kube.namespace, "delete", "pod", "shell", "--wait=true")
