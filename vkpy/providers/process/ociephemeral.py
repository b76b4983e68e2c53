"""Ephemeral containers (`kubectl debug`) in `runtime: oci`: whose PID namespace.

An ephemeral container is run like the pod's other containers (ocicontainers.py: its
own image and root, the sandbox's user, network, IPC and UTS namespaces), except that
with a `targetContainerName` it joins its target's PID namespace, as the kubelet asks
the CRI to (`NamespaceMode.TARGET`): `ps` in it shows the target's processes. The
target is found through runc by its container id, never by a pid kept in memory.

What an added container may ask for is what the pod's own containers may
(privileges.check_host_access: `privileged` only where allowed); its capabilities
(kubectl debug's profiles add SYS_PTRACE, NET_ADMIN, ...) are runc's to grant inside
the pod's user namespace, as for any container of the pod. `host` mode's checks of
ids and tolerated capabilities (identity.py) are for host processes and do not apply.
"""

from __future__ import annotations

import contextlib
import dataclasses
from collections.abc import Iterable, Sequence

from vkpy.oci.runtime.runc import Runc, RuncError
from vkpy.providers.base import ContainerConfig, PodConfig
from vkpy.providers.process import privileges
from vkpy.providers.process.ocipods import container_id


class TargetNotRunning(RuntimeError):
    """The ephemeral container's target has no running container to join."""


def target_of(config: ContainerConfig) -> str | None:
    """The container an ephemeral container targets (None: no target, or not one)."""
    return str(config.spec.get("targetContainerName") or "") or None


async def target_pid_namespace(runc: Runc, pod_uid: str, target: str) -> str:
    """`/proc/PID/ns/pid` of the target's running container (its newest run)."""
    prefix = container_id(pod_uid, target, 0)[:-1]
    running: list[tuple[int, int]] = []
    with contextlib.suppress(RuncError):
        for state in await runc.containers():
            number = state.id[len(prefix) :]
            if state.id.startswith(prefix) and number.isdigit() and state.status == "running":
                running.append((int(number), state.pid))
    if not running or max(running)[1] <= 0:
        raise TargetNotRunning(f'the target container "{target}" is not running')
    return f"/proc/{max(running)[1]}/ns/pid"


def check_added(pod: PodConfig, added: Sequence[ContainerConfig], allow: Iterable[str]) -> None:
    """Refuse ephemeral containers asking for what the node does not allow
    (UnsupportedError, as for the pod's own)."""
    privileges.check_host_access(
        dataclasses.replace(
            pod, init_containers=(), containers=(), ephemeral_containers=tuple(added)
        ),
        allow,
    )
