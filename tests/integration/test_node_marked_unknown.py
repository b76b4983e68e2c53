"""A node whose conditions someone else marked Unknown is Ready again at its next
check, on the real control plane (issue 30).

The node lifecycle controller marks a node's conditions Unknown when its Lease came
later than the grace period (at 5,000 nodes, while a burst of pods slowed the API
server), and only the node sets them again. The kubelet notices within 10 s; a vkpy
node waited for its next status heartbeat: a minute for one node, 5 minutes for a
node of a set, NotReady and tainted unreachable meanwhile. Here the test marks the
conditions as the controller does (a status patch, the Lease still renewed)."""

from __future__ import annotations

import json
import time

from tests.integration.agent import Kube, wait_for
from tests.integration.conftest import StartAgent
from tests.integration.test_agent_node import ready_status
from vkpy.devcluster import ClusterAccess

NEXT_CHECK = 25.0
"""The node checks every 10 s; a minute (one node's heartbeat) is the old bound."""


def mark_unknown(kube: Kube, node: str) -> None:
    """The Ready condition as the node lifecycle controller leaves it."""
    patch = {
        "status": {
            "conditions": [
                {
                    "type": "Ready",
                    "status": "Unknown",
                    "reason": "NodeStatusUnknown",
                    "message": "Kubelet stopped posting node status.",
                }
            ]
        }
    }
    kube.kubectl(
        "patch", "node", node, "--subresource=status", "--type=strategic", "-p", json.dumps(patch)
    )


def back_to_ready(kube: Kube, node: str) -> float:
    """Mark the node Unknown; seconds until it is Ready again."""
    wait_for("node Ready", lambda: ready_status(kube, node) == "True", timeout=60)
    mark_unknown(kube, node)
    assert ready_status(kube, node) == "Unknown"
    marked = time.monotonic()
    wait_for("node Ready again", lambda: ready_status(kube, node) == "True", NEXT_CHECK, 0.5)
    return time.monotonic() - marked


def test_one_node_marked_unknown_is_ready_again_at_its_next_check(
    cluster: ClusterAccess, start_agent: StartAgent
) -> None:
    agent = start_agent()
    kube = Kube(cluster)
    assert back_to_ready(kube, agent.node_name) < NEXT_CHECK


def test_a_set_s_node_marked_unknown_is_ready_again_at_its_next_check(
    cluster: ClusterAccess, start_agent: StartAgent
) -> None:
    agent = start_agent(args=["--nodes=3"], ports=3)
    kube = Kube(cluster)
    names = [f"{agent.node_name}-{i}" for i in range(3)]
    for name in names:
        wait_for(f"{name} Ready", lambda n=name: ready_status(kube, n) == "True", timeout=90)
    assert back_to_ready(kube, names[1]) < NEXT_CHECK
    assert all(ready_status(kube, n) == "True" for n in names)
