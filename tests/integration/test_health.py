"""The vkpy pod's probe endpoints (--health-port) against the real control plane: ready
once the node (or every node of a set) is registered and its status written, for a
single node and for a node set. HA replicas' probes are in test_ha.py."""

from __future__ import annotations

import urllib.error
import urllib.request

import pytest

from tests.integration.agent import free_port, wait_for
from tests.integration.conftest import StartAgent


def answer(port: int, path: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=5) as reply:
            return int(reply.status), reply.read().decode()
    except urllib.error.HTTPError as error:
        return int(error.code), error.read().decode()
    except OSError:
        return 0, ""


@pytest.mark.parametrize("nodes", [[], ["--nodes=3"]], ids=["one-node", "node-set"])
def test_probes_turn_ready_once_the_nodes_are_registered(
    start_agent: StartAgent, nodes: list[str]
) -> None:
    port = free_port()
    start_agent(args=[f"--health-port={port}", "--health-bind-address=127.0.0.1", *nodes])
    _, body = wait_for("/readyz 200", lambda: (a := answer(port, "/readyz"))[0] == 200 and a)
    assert body == "[+]loops ok\n[+]api ok\nok\n"
    assert answer(port, "/healthz") == (200, "[+]loops ok\nok\n")
