"""The Node: registered or adopted, its status patched on change and as a heartbeat,
NotReady while the backend is unhealthy; API errors never end the loop."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Sequence
from datetime import UTC, datetime
from typing import Any

import pytest

from tests.unit.fake_clock import FakeClock, settle
from tests.unit.fake_kube import FakeKube
from tests.unit.retained import retained_bytes
from tests.unit.scripted_backend import ScriptedBackend
from vkpy.core import rfc3339
from vkpy.kube.client import ApiError
from vkpy.kube.events import EventRecorder
from vkpy.node.heartbeat import node_controller
from vkpy.node.heartbeat.node_controller import NodeController
from vkpy.node.settings import NodeSettings, Taint
from vkpy.providers.errors import RetryableError

NODE_PATH = "/api/v1/nodes/vk-1"


class Node:
    def __init__(self, backend: type[ScriptedBackend] = ScriptedBackend) -> None:
        self.clock = FakeClock()
        self.kube = FakeKube(self.clock)
        self.backend = backend(self.clock)
        self.events = EventRecorder(self.kube, host="vk-1")  # type: ignore[arg-type]
        settings = NodeSettings(
            name="vk-1",
            internal_ip="192.0.2.1",
            taints=(Taint("virtual-kubelet.io/provider", "scripted", "NoSchedule"),),
            labels={"team": "a"},
            status_interval=60,
            check_interval=10,
        )
        self.controller = NodeController(
            self.kube,  # type: ignore[arg-type]
            self.backend,
            self.events,
            settings,
            clock=self.clock,
        )
        self.tasks: list[asyncio.Task[None]] = []

    def start(self) -> None:
        self.tasks = [
            asyncio.create_task(self.events.run()),
            asyncio.create_task(self.controller.run()),
        ]

    def ready(self) -> str:
        conditions = self.kube.objects[NODE_PATH]["status"]["conditions"]
        return next(c["status"] for c in conditions if c["type"] == "Ready")

    def status_patches(self) -> int:
        return len(self.kube.requests_to("PATCH", NODE_PATH + "/status$"))


@pytest.fixture
async def node(request: pytest.FixtureRequest) -> AsyncIterator[Node]:
    n = Node(getattr(request, "param", ScriptedBackend))
    yield n
    for task in n.tasks:
        task.cancel()
    results = await asyncio.gather(*n.tasks, return_exceptions=True)
    for result in results:
        if isinstance(result, Exception):
            raise result


async def test_registers_and_reports_ready(node: Node) -> None:
    node.start()
    await settle()
    assert node.controller.registered.is_set()
    created = node.kube.objects[NODE_PATH]
    assert created["metadata"]["labels"]["team"] == "a"
    assert node.ready() == "True"
    assert node.controller.uid == "uid-vk-1"
    assert [e["reason"] for e in node.kube.events()] == ["RegisteredNode"]


async def test_a_new_node_is_created_with_its_status_and_not_patched_at_once(
    node: Node,
) -> None:
    """The API server keeps a Node's status on create (the kubelet registers so): a
    status patch right after it wrote the same again, 5000 more writes when 5000 nodes
    register (issue 30). The next one is the heartbeat's."""
    node.start()
    await settle()
    assert node.ready() == "True"
    assert len(node.kube.requests_to("POST", "/api/v1/nodes$")) == 1
    assert node.status_patches() == 0
    await node.clock.advance(50)  # checked 5 times: the status is what was created
    assert node.status_patches() == 0
    await node.clock.advance(20)  # the heartbeat (60 s) is due
    assert node.status_patches() == 1


async def test_a_registered_node_s_times_are_its_clock_s(node: Node) -> None:
    """The times a new Node is created with (its conditions' heartbeat and transition
    times) come from the node's injected clock, as every later status's do."""
    node.start()
    await settle()
    conditions = node.kube.objects[NODE_PATH]["status"]["conditions"]
    now = datetime.fromtimestamp(node.clock.time(), UTC)
    assert {rfc3339.parse(c["lastHeartbeatTime"]) for c in conditions} == {now}
    assert {rfc3339.parse(c["lastTransitionTime"]) for c in conditions} == {now}


def mark_unknown(node: Node) -> dict[str, Any]:
    """What the node lifecycle controller does to a node whose Lease came late."""
    obj = node.kube.objects[NODE_PATH]
    for condition in obj["status"]["conditions"]:
        condition["status"] = "Unknown"
        condition["reason"] = "NodeStatusUnknown"
    return obj


async def test_a_node_marked_unknown_by_the_controller_is_ready_again_at_the_next_check(
    node: Node,
) -> None:
    """Issue 30, 5,000 nodes: the node lifecycle controller marked nodes Unknown while
    the API server was slow, and they stayed NotReady until their next heartbeat (5
    minutes in a set). Told what the server holds (the node watch), the node writes
    its status at its next check, as the kubelet does, with a new transition time."""
    node.start()
    await settle()
    await node.clock.advance(10)
    assert node.status_patches() == 0
    node.controller.observed(mark_unknown(node))
    await node.clock.advance(10)
    assert node.ready() == "True"
    assert node.status_patches() == 1
    ready = node.kube.objects[NODE_PATH]["status"]["conditions"][0]
    changed = datetime.fromtimestamp(node.clock.time(), UTC)
    assert rfc3339.parse(ready["lastTransitionTime"]) == changed
    await node.clock.advance(30)  # the server holds its status again: nothing more
    assert node.status_patches() == 1


async def test_its_own_status_seen_again_costs_no_write(node: Node) -> None:
    node.start()
    await settle()
    node.controller.observed(node.kube.objects[NODE_PATH])
    await node.clock.advance(50)
    assert node.status_patches() == 0


async def test_a_node_told_it_may_have_missed_a_change_writes_once(node: Node) -> None:
    """The watch had to relist: what the server holds may have changed unseen."""
    node.start()
    await settle()
    node.controller.resend()
    await node.clock.advance(10)
    assert node.status_patches() == 1
    await node.clock.advance(40)
    assert node.status_patches() == 1


async def test_adopts_an_existing_node_keeping_what_others_added(node: Node) -> None:
    node.kube.objects[NODE_PATH] = {
        "metadata": {
            "name": "vk-1",
            "uid": "old-uid",
            "resourceVersion": "5",
            "labels": {"other": "x"},
        },
        "spec": {"taints": [{"key": "someone/else", "effect": "NoExecute"}]},
        "status": {},
    }
    node.start()
    await settle()
    adopted = node.kube.objects[NODE_PATH]
    assert adopted["metadata"]["labels"]["other"] == "x"
    assert adopted["metadata"]["labels"]["team"] == "a"
    keys = [t["key"] for t in adopted["spec"]["taints"]]
    assert keys == ["someone/else", "virtual-kubelet.io/provider"]
    assert node.controller.uid == "old-uid"


async def test_status_only_on_change_or_heartbeat(node: Node) -> None:
    node.start()
    await settle()
    first = node.status_patches()
    await node.clock.advance(50)  # pinged 5 times, nothing changed, heartbeat not due
    assert node.status_patches() == first
    await node.clock.advance(20)
    assert node.status_patches() == first + 1


async def test_a_status_whose_sources_did_not_change_is_not_built_again(
    node: Node, monkeypatch: pytest.MonkeyPatch
) -> None:
    """1000 nodes check their status 100 times a second; building and comparing it
    was a tenth of their steady CPU (issue 30). Only a changed health, backend info or
    resources, or a due heartbeat, build it."""
    built: list[float] = []
    real = node_controller.node_status

    def counted(*args: Any, **kwargs: Any) -> Any:
        built.append(node.clock.monotonic())
        return real(*args, **kwargs)

    monkeypatch.setattr(node_controller, "node_status", counted)
    node.start()
    await settle()
    first = (len(built), node.status_patches())
    await node.clock.advance(50)  # checked 5 times: nothing changed, heartbeat not due
    assert (len(built), node.status_patches()) == first
    node.backend.healthy = RetryableError("cannot reach the platform")
    await node.clock.advance(10)
    assert node.ready() == "False" and len(built) == first[0] + 1
    await node.clock.advance(10)  # unhealthy still: nothing new to build
    assert len(built) == first[0] + 1


async def test_unhealthy_backend_turns_the_node_not_ready_and_back(node: Node) -> None:
    node.start()
    await settle()
    node.backend.healthy = RetryableError("cannot reach the platform")
    await node.clock.advance(10)
    assert node.ready() == "False"
    conditions = node.kube.objects[NODE_PATH]["status"]["conditions"]
    ready = next(c for c in conditions if c["type"] == "Ready")
    assert "cannot reach the platform" in ready["message"]
    assert node.kube.events("NodeNotReady")
    node.backend.healthy = None
    await node.clock.advance(10)
    assert node.ready() == "True"
    assert node.kube.events("NodeReady")


@pytest.mark.parametrize(
    "error",
    [
        ApiError(500, "InternalError", "etcd"),
        ApiError(0, "Unreachable", "connection refused"),
        ApiError(409, "Conflict", "changed"),
        ApiError(403, "Forbidden", "no"),
        ApiError(429, "TooManyRequests", "slow down"),
    ],
)
async def test_api_errors_during_status_updates_are_survived(node: Node, error: ApiError) -> None:
    node.start()
    await settle()
    node.backend.healthy = RetryableError("down")
    node.kube.fail("PATCH", NODE_PATH + "/status$", error)
    await node.clock.advance(10)
    assert node.ready() == "True"  # the patch failed
    await node.clock.advance(10)
    assert node.ready() == "False"  # and was made at the next check
    assert not any(t.done() for t in node.tasks)


async def test_registration_refused_for_good_ends_the_controller(node: Node) -> None:
    node.kube.fail("POST", "/api/v1/nodes$", ApiError(403, "Forbidden", "not allowed"))
    task = asyncio.create_task(node.controller.run())
    with pytest.raises(ApiError, match="403"):
        await task
    assert not node.controller.registered.is_set()


class CidrBackend(ScriptedBackend):
    """A backend that addresses pods from the Node's podCIDRs (UsesPodCIDR)."""

    def __init__(self, clock: FakeClock) -> None:
        super().__init__(clock)
        self.cidrs: list[list[str]] = []

    def set_pod_cidrs(self, cidrs: Sequence[str]) -> None:
        self.cidrs.append(list(cidrs))


@pytest.mark.parametrize("node", [CidrBackend], indirect=True)
async def test_the_nodes_pod_cidrs_reach_a_backend_that_uses_them(node: Node) -> None:
    backend = node.backend
    assert isinstance(backend, CidrBackend)
    node.kube.objects[NODE_PATH] = {
        "metadata": {"name": "vk-1", "uid": "u", "resourceVersion": "5"},
        "spec": {"podCIDR": "10.244.3.0/24"},
        "status": {},
    }
    node.start()
    await settle()
    assert backend.cidrs[-1] == ["10.244.3.0/24"]
    # Set later (kube-controller-manager allocates after registration): the heartbeat
    # reads it back.
    node.kube.objects[NODE_PATH]["spec"]["podCIDRs"] = ["10.244.3.0/24", "fd00:3::/64"]
    await node.clock.advance(70)
    assert backend.cidrs[-1] == ["10.244.3.0/24", "fd00:3::/64"]


async def test_a_first_status_write_that_times_out_is_retried_not_fatal(node: Node) -> None:
    """Issue 17: 1000 nodes registering on a loaded API server: one node's first status
    patch timed out, which ended its controller and, in a node set, the process."""
    node.kube.fail("PATCH", NODE_PATH + "/status$", ApiError(0, "Unreachable", "TimeoutError()"))
    node.start()
    await settle()
    assert node.controller.registered.is_set()
    assert not any(t.done() for t in node.tasks)
    await node.clock.advance(10)
    assert node.ready() == "True"  # written at the next check
    assert not any(t.done() for t in node.tasks)


async def test_what_a_node_remembers_of_its_status_is_small(node: Node) -> None:
    """A node of a set of 1000 kept the status it last sent and the conditions last
    answered as dicts (issue 30): now packed, and a change is still told from a
    heartbeat, with each condition's transition time kept."""
    node.start()
    await settle()
    transition = node.kube.objects[NODE_PATH]["status"]["conditions"][0]["lastTransitionTime"]
    await node.clock.advance(70)
    remembered = retained_bytes((node.controller._last_sent, node.controller._conditions))
    assert remembered < 1000, remembered  # 7330 bytes as dicts, 2186 as JSON
    assert node.status_patches() == 1  # one heartbeat (created with its status): no change
    ready = node.kube.objects[NODE_PATH]["status"]["conditions"][0]
    assert ready["type"] == "Ready" and ready["lastTransitionTime"] == transition
