"""Ephemeral containers (`kubectl debug`): hand new ones to the backend, or say why not.

`kubectl debug` adds a container to a running pod's `spec.ephemeralContainers`
(through the pods/ephemeralcontainers subresource) and then waits for its status to
show it running or terminated. The pod controller calls `sync` on every sync of a
running pod: containers not handed over yet are resolved like any container and
given to a backend that `RunsEphemeralContainers`; the backend reports their states
in `PodState.ephemeral_containers`. A backend that cannot run them (or refuses one)
gets nothing: `status` reports each such container as terminated with a reason and
message, and a Warning Event says why, so kubectl ends with a message instead of
waiting forever. The state per pod is here, so the controller needs three calls:
`sync`, `status` and `forget`.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Mapping
from dataclasses import dataclass

from vkpy.core.objects import KubeObject, ephemeral_containers_of
from vkpy.kube.events import WARNING, EventRecorder, InvolvedObject
from vkpy.node.pods.keyed_queue import Retry
from vkpy.node.podspec.env import ConfigError, ObjectSource
from vkpy.node.podspec.pod_config import ephemeral_container_configs
from vkpy.providers.base import (
    ContainerState,
    PodRef,
    PodState,
    Provider,
    RunsEphemeralContainers,
)
from vkpy.providers.errors import (
    InvalidInputError,
    NotFoundError,
    ProviderError,
    RetryableError,
)

log = logging.getLogger(__name__)

CANNOT_RUN = "ContainerCannotRun"
CONFIG_ERROR = "CreateContainerConfigError"


@dataclass(frozen=True)
class _Refused:
    reason: str
    message: str


def _names(pod: KubeObject) -> list[str]:
    return [str(c.get("name", "")) for c in ephemeral_containers_of(pod)]


class EphemeralContainers:
    """Which ephemeral containers of each pod went to the backend, and which cannot run."""

    def __init__(
        self,
        provider: Provider,
        events: EventRecorder,
        objects: ObjectSource,
        host_ip: str,
    ) -> None:
        self._provider = provider
        self._events = events
        self._objects = objects
        self._host_ip = host_ip
        self._handed: dict[str, set[str]] = {}
        self._refused: dict[str, dict[str, _Refused]] = {}

    async def sync(self, pod: KubeObject, ref: PodRef) -> None:
        """Start the pod's new ephemeral containers (the pod runs in the backend).

        Raises Retry when the backend had a transient failure."""
        names = _names(pod)
        if not names:
            return
        handed = self._handed.setdefault(ref.uid, set())
        new = [n for n in names if n not in handed]
        if not new:
            return
        if not isinstance(self._provider, RunsEphemeralContainers):
            message = f"the {self._provider.name} backend cannot run ephemeral containers"
            self._refuse(pod, ref, new, CANNOT_RUN, message)
            return
        allocatable: Mapping[str, str] = self._provider.node_resources().allocatable
        try:
            configs = await ephemeral_container_configs(
                pod, self._objects, self._host_ip, allocatable
            )
        except ConfigError as error:
            self._refuse(pod, ref, new, CONFIG_ERROR, str(error))
            return
        try:
            await self._provider.run_ephemeral_containers(ref, configs)
        except RetryableError as error:
            raise Retry(f"ephemeral containers {ref}: {error}", after=error.retry_after) from error
        except NotFoundError:
            return  # the backend lost the pod: it is created again, then this retried
        except (InvalidInputError, ProviderError) as error:
            self._refuse(pod, ref, new, CANNOT_RUN, str(error))
            return
        handed.update(new)
        log.info("ephemeral containers started", extra={"pod": str(ref), "containers": new})

    def _refuse(
        self, pod: KubeObject, ref: PodRef, names: list[str], reason: str, message: str
    ) -> None:
        self._handed.setdefault(ref.uid, set()).update(names)
        refused = self._refused.setdefault(ref.uid, {})
        for name in names:
            refused[name] = _Refused(reason, message)
            involved = InvolvedObject(
                kind="Pod",
                name=ref.name,
                namespace=ref.namespace,
                uid=ref.uid,
                field_path=f"spec.ephemeralContainers{{{name}}}",
            )
            self._events.emit(involved, WARNING, "Failed", f"Error: {message}")
        log.warning(
            "ephemeral containers cannot run",
            extra={"pod": str(ref), "containers": names, "reason": reason, "error": message},
        )

    def status(self, pod: KubeObject, ref: PodRef, state: PodState) -> PodState:
        """`state` with the ephemeral containers that cannot run reported as terminated."""
        refused = self._refused.get(ref.uid)
        if not refused:
            return state
        known = {c.name for c in state.ephemeral_containers}
        images = {str(c.get("name")): str(c.get("image", "")) for c in ephemeral_containers_of(pod)}
        extra = tuple(
            ContainerState(
                name=name,
                state="terminated",
                reason=why.reason,
                message=why.message,
                exit_code=128,
                image=images.get(name, ""),
            )
            for name, why in refused.items()
            if name not in known
        )
        return dataclasses.replace(
            state, ephemeral_containers=(*state.ephemeral_containers, *extra)
        )

    def forget(self, uid: str) -> None:
        self._handed.pop(uid, None)
        self._refused.pop(uid, None)
