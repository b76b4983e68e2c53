"""Adopting an existing Node at start survives API errors (issue 11, defect 10).

vkpy restarted on a node that still exists finds the Node already there (409 on
create) and adopts it. The node lifecycle controller writes the same Node at the
same time (taints, conditions), so the adopting patch can meet a 409 of its own, and
the API server can answer 5xx while it restarts. None of that may end the process:
registration keeps retrying with back-off until the Node is ours. A fake API client
stands in for the API server (pure logic; sleeps are recorded, not slept).
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Any

import pytest

from vkpy.core.clock import SystemClock
from vkpy.kube.client import ApiError
from vkpy.kube.events import EventRecorder
from vkpy.node.heartbeat.node_controller import NodeController
from vkpy.node.settings import NodeSettings, Taint
from vkpy.providers.base import NodeInfo, NodeResources, PodRef

EXISTING = {
    "metadata": {"name": "vk", "uid": "uid-old", "resourceVersion": "7", "labels": {"x": "y"}},
    "spec": {
        "taints": [
            {"key": "node.kubernetes.io/unreachable", "effect": "NoExecute"},
            {"key": "virtual-kubelet.io/provider", "value": "old", "effect": "NoSchedule"},
        ]
    },
    "status": {"conditions": [{"type": "Ready", "status": "Unknown"}]},
}


class Backend:
    name = "fake"

    def node_info(self) -> NodeInfo:
        return NodeInfo("linux", "amd64", "fake", "1")

    def node_resources(self) -> NodeResources:
        return NodeResources({"cpu": "4"}, {"cpu": "4"})

    async def ping(self) -> None:
        return None

    async def list_pods(self) -> Sequence[PodRef]:
        return ()


class FakeApi:
    """Answers from a script per (method, path): an ApiError is raised, anything else
    returned; the last answer repeats. Every call is recorded."""

    def __init__(self, script: dict[tuple[str, str], list[Any]]) -> None:
        self.script = script
        self.calls: list[tuple[str, str, Any]] = []

    def _answer(self, method: str, path: str, body: Any = None) -> Any:
        self.calls.append((method, path, body))
        answers = self.script[(method, path)]
        answer = answers.pop(0) if len(answers) > 1 else answers[0]
        if isinstance(answer, ApiError):
            raise answer
        return answer

    async def create(self, path: str, body: Any) -> Any:
        return self._answer("POST", path, body)

    async def get(self, path: str, query: Any = None) -> Any:
        return self._answer("GET", path)

    async def patch(self, path: str, body: Any, content_type: str = "") -> Any:
        return self._answer("PATCH", path, body)


def conflict() -> ApiError:
    return ApiError(409, "Conflict", "the object has been modified")


def unavailable() -> ApiError:
    return ApiError(503, "ServiceUnavailable", "the server is restarting")


def adopted(uid: str = "uid-old") -> dict[str, Any]:
    return {**EXISTING, "metadata": {**EXISTING["metadata"], "uid": uid}}


class RecordingClock(SystemClock):
    """The system clock, but sleeps are recorded and return at once."""

    def __init__(self) -> None:
        self.delays: list[float] = []

    async def sleep(self, seconds: float) -> None:
        self.delays.append(seconds)
        await asyncio.sleep(0)


async def register(api: FakeApi) -> tuple[NodeController, list[float]]:
    clock = RecordingClock()
    settings = NodeSettings(
        name="vk",
        internal_ip="127.0.0.1",
        taints=(Taint("virtual-kubelet.io/provider", "fake", "NoSchedule"),),
    )
    events = EventRecorder(api, host="vk")  # type: ignore[arg-type]
    controller = NodeController(api, Backend(), events, settings, clock=clock)  # type: ignore[arg-type]
    async with asyncio.timeout(5):
        await controller.register()
    return controller, clock.delays


STATUS = ("PATCH", "/api/v1/nodes/vk/status")


@pytest.mark.parametrize(
    ("gets", "patches"),
    [
        ([unavailable(), EXISTING], [adopted()]),
        ([EXISTING], [unavailable(), adopted()]),
        ([EXISTING], [conflict(), adopted()]),
        ([ApiError(0, "Unreachable", "connection refused"), EXISTING], [conflict(), adopted()]),
    ],
    ids=["get-503", "patch-503", "patch-409", "unreachable-then-409"],
)
async def test_adoption_retries_until_the_node_is_ours(gets: list[Any], patches: list[Any]) -> None:
    api = FakeApi(
        {
            ("POST", "/api/v1/nodes"): [conflict()],
            ("GET", "/api/v1/nodes/vk"): gets,
            ("PATCH", "/api/v1/nodes/vk"): patches,
            STATUS: [adopted()],
        }
    )
    controller, delays = await register(api)
    assert controller.registered.is_set()
    assert controller.uid == "uid-old"
    assert delays, "a failed attempt is retried after a back-off"
    adopt = [
        body for method, path, body in api.calls if (method, path) == ("PATCH", "/api/v1/nodes/vk")
    ]
    assert adopt[-1]["metadata"]["resourceVersion"] == "7"
    taints = adopt[-1]["spec"]["taints"]
    assert {"key": "node.kubernetes.io/unreachable", "effect": "NoExecute"} in taints
    assert {"key": "virtual-kubelet.io/provider", "value": "fake", "effect": "NoSchedule"} in taints
    assert len(taints) == 2


async def test_a_node_deleted_while_adopting_is_created_again() -> None:
    api = FakeApi(
        {
            ("POST", "/api/v1/nodes"): [conflict(), adopted("uid-new")],
            ("GET", "/api/v1/nodes/vk"): [ApiError(404, "NotFound", "nodes vk not found")],
            ("PATCH", "/api/v1/nodes/vk"): [adopted()],
            STATUS: [adopted("uid-new")],
        }
    )
    controller, _ = await register(api)
    assert controller.uid == "uid-new"
    assert [c[:2] for c in api.calls[:3]] == [
        ("POST", "/api/v1/nodes"),
        ("GET", "/api/v1/nodes/vk"),
        ("POST", "/api/v1/nodes"),
    ]


async def test_creation_errors_are_retried_with_growing_back_off() -> None:
    api = FakeApi(
        {
            ("POST", "/api/v1/nodes"): [unavailable(), unavailable(), unavailable(), adopted("u")],
            STATUS: [adopted("u")],
        }
    )
    controller, delays = await register(api)
    assert controller.uid == "u"
    assert len(delays) == 3 and delays[0] < delays[1] < delays[2]


async def test_a_forbidden_registration_is_fatal_and_says_why() -> None:
    api = FakeApi({("POST", "/api/v1/nodes"): [ApiError(403, "Forbidden", "nodes is forbidden")]})
    with pytest.raises(ApiError, match="403"):
        await register(api)
