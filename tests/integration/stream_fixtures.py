"""Nodes with a running pod to exec into, attach to and forward ports of.

`sim_box`: a sim node and a sim pod `box` (the sim backend's built-in commands).
`process_box`: a process-backend node and a pod `box` whose `app` container echoes
what it reads on stdin (stdin: true, stdinOnce: true, as `kubectl run -i` makes it:
an attach session lasts until the process ends) and whose `web` container is
`python3 -m http.server` on a free port, serving a listing of `/`. Containers the
process backend leaves running (by design, it outlives vkpy) are killed at the end.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import pytest

from tests.integration.agent import Agent, Kube, free_port, sim_pod
from tests.integration.conftest import StartAgent
from tests.integration.stream_helpers import Footprint, kill_leftover_processes, wait_running

ECHO_STDIN = (
    'echo ready; while read -r line; do echo "got: $line"; '
    'if [ "$line" = quit ]; then exit 0; fi; done; sleep 3600'
)


@dataclass
class Box:
    agent: Agent
    pod: str
    metrics_port: int
    http_port: int = 0
    backend: str = "sim"

    def footprint(self) -> Footprint:
        return Footprint.of(self.agent, self.metrics_port)

    def assert_released(self, before: Footprint) -> None:
        before.assert_back(self.agent, self.metrics_port)


@pytest.fixture
def sim_box(start_agent: StartAgent, kube: Kube) -> Box:
    metrics = free_port()
    agent = start_agent(args=[f"--metrics-port={metrics}"])
    app = {"name": "app", "image": "x", "stdin": True}
    kube.create(sim_pod("box", agent.node_name, containers=[app]))
    wait_running(kube, "box")
    return Box(agent, "box", metrics)


@pytest.fixture
def process_box(start_agent: StartAgent, kube: Kube) -> Iterator[Box]:
    metrics = free_port()
    host_programs = {"runtime": "host", "network": "host"}  # as written (modes.py)
    agent = start_agent(
        provider="process", config=host_programs, args=[f"--metrics-port={metrics}"]
    )
    port = free_port()
    pod = sim_pod(
        "box",
        agent.node_name,
        containers=[
            {
                "name": "app",
                "image": "busybox",
                "command": ["sh", "-c", ECHO_STDIN],
                "stdin": True,
                "stdinOnce": True,
                "env": [{"name": "GREETING", "value": "hello from the pod"}],
            },
            {
                "name": "web",
                "image": "python",
                "command": [
                    *("python3", "-m", "http.server", str(port)),
                    *("--bind", "127.0.0.1", "--directory", "/"),
                ],
            },
        ],
    )
    kube.create(pod)
    try:
        wait_running(kube, "box")
        yield Box(agent, "box", metrics, port, "process")
    finally:
        agent.stop()
        kill_leftover_processes(agent.state_dir)
