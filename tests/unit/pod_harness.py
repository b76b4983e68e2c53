"""A pod controller on a fake API server, a scripted backend and a fake clock.

`Harness` wires the real PodController, EventRecorder and ApiObjectSource to
tests/unit/fake_kube.py, tests/unit/scripted_backend.py and tests/unit/fake_clock.py,
so a test adds pods, moves time and looks at what the API server holds, in
milliseconds. `async with Harness() as h:` starts everything and stops it again.
"""

from __future__ import annotations

import asyncio
import copy
from typing import Any

from tests.unit.fake_clock import FakeClock, settle
from tests.unit.fake_kube import FakeKube, Obj
from tests.unit.scripted_backend import PolledBackend, ScriptedBackend
from vkpy.kube.events import EventRecorder
from vkpy.node.pods.pod_controller import PodController
from vkpy.node.podspec.pod_config import ApiObjectSource
from vkpy.node.podspec.pod_object import pod_ref
from vkpy.node.settings import PodControllerSettings
from vkpy.providers.base import PodRef

NODE = "node-1"
HOST_IP = "192.0.2.1"


def pod(name: str, *, containers: int | list[Obj] = 1, **spec: Any) -> Obj:
    if isinstance(containers, int):
        containers = [
            {"name": f"c{n}", "image": f"img{n}:1", "command": ["run"]} for n in range(containers)
        ]
    return {
        "metadata": {"name": name, "namespace": "ns"},
        "spec": {
            "nodeName": NODE,
            "restartPolicy": "Always",
            "containers": containers,
            **spec,
        },
        "status": {"phase": "Pending"},
    }


class Harness:
    def __init__(self, *, polled: bool = False, **settings: Any) -> None:
        self.clock = FakeClock()
        self.kube = FakeKube(self.clock)
        self.backend: PolledBackend = (
            PolledBackend(self.clock) if polled else ScriptedBackend(self.clock)
        )
        self.events = EventRecorder(self.kube, host=NODE)  # type: ignore[arg-type]
        self.settings = PodControllerSettings(node_name=NODE, host_ip=HOST_IP, **settings)
        self.controller: PodController | None = None
        self.objects = ApiObjectSource(self.kube, self.clock)  # type: ignore[arg-type]
        self._tasks: list[asyncio.Task[None]] = []

    async def __aenter__(self) -> Harness:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()

    async def start(self) -> PodController:
        self.controller = PodController(
            self.kube,  # type: ignore[arg-type]
            self.backend,
            self.events,
            self.objects,
            self.settings,
            clock=self.clock,
        )
        self._tasks = [
            asyncio.create_task(self.events.run(), name="events"),
            asyncio.create_task(self.controller.run(), name="pods"),
        ]
        await settle()
        return self.controller

    async def stop(self) -> None:
        for task in self._tasks:
            task.cancel()
        results = await asyncio.gather(*self._tasks, return_exceptions=True)
        self._tasks = []
        await self.objects.close()
        for result in results:
            if isinstance(result, Exception):
                raise result

    async def add(self, name: str, **spec: Any) -> Obj:
        """A pod bound to the node; returns it as the API server has it once settled."""
        created = self.kube.add_pod(pod(name, **spec))
        await settle()
        return self.current(created)

    def current(self, obj: Obj) -> Obj:
        found = self.kube.pod(obj["metadata"]["namespace"], obj["metadata"]["name"])
        assert found is not None, "the pod is gone from the API server"
        return copy.deepcopy(found)

    def ref(self, obj: Obj) -> PodRef:
        return pod_ref(obj)

    def condition(self, obj: Obj, kind: str) -> str | None:
        for condition in self.current(obj)["status"].get("conditions") or []:
            if condition["type"] == kind:
                return str(condition["status"])
        return None

    def status_patches(self, obj: Obj) -> list[Obj]:
        path = self.kube.pod_path(obj) + "/status"
        return [r.body for r in self.kube.requests if r.method == "PATCH" and r.path == path]
