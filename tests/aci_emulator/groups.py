"""The emulator's container groups: provisioning, then containers, as ACI reports them.

A group created by PUT is Pending, then Creating while its images are "pulled"
(events Pulling/Pulled; an image that cannot be had fails the deployment with
ACI's error), then Succeeded: its init containers run one after the other, then its
containers, each restarted by the group's policy. The group's instance view state
follows (Running, Succeeded, Failed; Stopped after a stop or a Spot eviction).
Answers are built with the SDK's own models, so the client sees the service's shape.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import secrets
import shutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from azure.mgmt.containerinstance import models

from tests.aci_emulator.limits import ArmError
from tests.aci_emulator.runtime import IDLE, Container, EventLog, Mount, now


@dataclass
class Timing:
    """How long the emulated platform takes (seconds)."""

    pending: float = 0.3
    pulling: float = 0.5


@dataclass
class Group:
    subscription: str
    resource_group: str
    name: str
    model: models.ContainerGroup
    workdir: Path
    provisioning: str = "Pending"
    state: str = "Pending"
    error: ArmError | None = None
    events: EventLog = field(default_factory=EventLog)
    inits: list[Container] = field(default_factory=list)
    containers: list[Container] = field(default_factory=list)
    task: asyncio.Task[None] | None = None
    ip: str = ""
    created: float = 0.0
    stopped: bool = False
    planned_error: ArmError | None = None
    """A capacity or quota failure the deployment ends with (a cue of the test)."""

    @property
    def id(self) -> str:
        return (
            f"/subscriptions/{self.subscription}/resourceGroups/{self.resource_group}"
            f"/providers/Microsoft.ContainerInstance/containerGroups/{self.name}"
        )

    def container(self, name: str) -> Container | None:
        for c in (*self.containers, *self.inits):
            if c.name == name:
                return c
        return None

    def document(self, instance_view: bool = True) -> dict[str, Any]:
        """The group as GET answers it (`instance_view=False`: as list answers it)."""
        body: dict[str, Any] = self.model.serialize(keep_readonly=True)
        body["id"] = self.id
        body["name"] = self.name
        body["type"] = "Microsoft.ContainerInstance/containerGroups"
        props = body.setdefault("properties", {})
        props["provisioningState"] = self.provisioning
        if self.ip and props.get("ipAddress") is not None:
            props["ipAddress"]["ip"] = self.ip
            label = props["ipAddress"].get("dnsNameLabel")
            if label:
                props["ipAddress"]["fqdn"] = f"{label}.{self.model.location}.azurecontainer.io"
        for kind, runs in (("containers", self.containers), ("initContainers", self.inits)):
            for doc, run in zip(props.get(kind) or [], runs, strict=False):
                for variable in doc["properties"].get("environmentVariables") or []:
                    variable.pop("secureValue", None)  # never returned, as ACI does
                if instance_view:
                    view = _VIEWS[kind].deserialize(run.instance_view())
                    doc["properties"]["instanceView"] = view.serialize(keep_readonly=True)
        for volume in props.get("volumes") or []:
            if volume.get("secret"):
                volume["secret"] = {k: None for k in volume["secret"]}
            if volume.get("azureFile"):
                volume["azureFile"].pop("storageAccountKey", None)
        for credential in props.get("imageRegistryCredentials") or []:
            credential.pop("password", None)
        if instance_view:
            view = models.ContainerGroupPropertiesInstanceView.deserialize(
                {"state": self.state, "events": list(self.events.items)}
            )
            props["instanceView"] = view.serialize(keep_readonly=True)
        return body


_VIEWS: dict[str, Any] = {
    "containers": models.ContainerPropertiesInstanceView,
    "initContainers": models.InitContainerPropertiesDefinitionInstanceView,
}
"""The SDK's models of instance views: every view sent is built with them."""


def _mounts(group: Group, container: Any) -> list[Mount]:
    """The container's mounts of the group's emptyDir volumes (see `runtime.Mount`)."""
    empty = {v.name for v in group.model.volumes or [] if v.empty_dir is not None}
    return [
        Mount(group.workdir / "volumes" / m.name, m.mount_path, bool(m.read_only))
        for m in container.volume_mounts or []
        if m.name in empty
    ]


def _env(variables: list[models.EnvironmentVariable] | None) -> dict[str, str]:
    return {v.name: v.secure_value or v.value or "" for v in variables or []}


class Lifecycle:
    """Runs one group's provisioning and containers (see the module docstring)."""

    def __init__(
        self,
        timing: Timing,
        registries: dict[str, tuple[str, str]],
        unreachable_images: set[str],
    ) -> None:
        self.timing = timing
        self.registries = registries
        self.unreachable_images = unreachable_images

    def prepare(self, group: Group) -> None:
        model = group.model
        group.workdir.mkdir(parents=True, exist_ok=True)
        for volume in model.volumes or []:
            target = group.workdir / "volumes" / volume.name
            target.mkdir(parents=True, exist_ok=True)
            for key, value in (volume.secret or {}).items():
                (target / key).write_bytes(base64.b64decode(value))
        policy = model.restart_policy or "Always"
        group.inits = [
            Container(
                c.name,
                c.image,
                list(c.command or IDLE),
                _env(c.environment_variables),
                group.workdir,
                "Never",
                mounts=_mounts(group, c),
            )
            for c in model.init_containers or []
        ]
        group.containers = [
            Container(
                c.name,
                c.image,
                list(c.command or IDLE),
                _env(c.environment_variables),
                group.workdir,
                policy,
                liveness=c.liveness_probe,
                readiness=c.readiness_probe,
                mounts=_mounts(group, c),
            )
            for c in model.containers
        ]

    def _pull_error(self, group: Group) -> ArmError | None:
        credentials = {c.server: c for c in group.model.image_registry_credentials or []}
        for c in [*group.model.containers, *(group.model.init_containers or [])]:
            image = c.image or ""
            if image in self.unreachable_images or "does-not-exist" in image:
                return ArmError(
                    400,
                    "InaccessibleImage",
                    f"The image '{image}' in container group '{group.name}' is not accessible. "
                    "Please check the image and registry credential.",
                )
            server = image.split("/", 1)[0] if "/" in image else "index.docker.io"
            wanted = self.registries.get(server)
            if wanted is not None:
                given = credentials.get(server)
                if given is None or (given.username, given.password) != wanted:
                    return ArmError(
                        400,
                        "RegistryErrorResponse",
                        f"An error response is received from the docker registry '{server}'. "
                        "Please retry later.",
                    )
        return None

    async def run(self, group: Group) -> None:
        try:
            await asyncio.sleep(self.timing.pending)
            if group.planned_error is not None:
                group.provisioning, group.state = "Failed", "Failed"
                group.error = group.planned_error
                group.events.add("Failed", group.error.message, "Warning")
                return
            group.provisioning = "Creating"
            for c in [*group.inits, *group.containers]:
                c.events.add("Pulling", f'pulling image "{c.image}"')
            await asyncio.sleep(self.timing.pulling)
            error = self._pull_error(group)
            if error is not None:
                group.provisioning, group.state, group.error = "Failed", "Failed", error
                for c in [*group.inits, *group.containers]:
                    c.events.add("Failed", error.message, "Warning")
                return
            for c in [*group.inits, *group.containers]:
                c.events.add("Pulled", f'Successfully pulled image "{c.image}"')
            group.provisioning = "Succeeded"
            group.ip = group.ip or f"10.240.{secrets.randbelow(250)}.{secrets.randbelow(250) + 2}"
            group.state = "Pending" if group.inits else "Running"
            for init in group.inits:
                code = await init.run_once()
                if code != 0:
                    group.state = "Failed"
                    return
            group.state = "Running"
            async with asyncio.TaskGroup() as tasks:
                for c in group.containers:
                    tasks.create_task(c.supervise(lambda: self._settle(group)))
            self._settle(group)
        except asyncio.CancelledError:
            await self.stop_containers(group)
            raise

    def _settle(self, group: Group) -> None:
        if group.stopped:
            return
        states = [c.current for c in group.containers]
        if any(s.state != "Terminated" for s in states):
            group.state = "Running"
        elif all(s.exit_code == 0 for s in states):
            group.state = "Succeeded"
        else:
            group.state = "Failed"

    async def stop_containers(self, group: Group) -> None:
        for c in [*group.inits, *group.containers]:
            await c.stop()

    async def remove(self, group: Group) -> None:
        if group.task is not None:
            group.task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await group.task
        await self.stop_containers(group)
        shutil.rmtree(group.workdir, ignore_errors=True)

    def started(self) -> float:
        return now().timestamp()
