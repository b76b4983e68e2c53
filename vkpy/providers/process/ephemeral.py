"""Ephemeral containers (`kubectl debug`) of the process backend: whose context they use.

An ephemeral container is added to a running pod and runs once. With a
`targetContainerName` it runs in that container's context: its root (the same
directory, so the same volume mounts, through a link), its environment (the
ephemeral container's own variables win) and, unless it names its own, its working
directory. Without one it gets a root of its own with its own mounts, like any
container. Either way it is then run like the pod's other containers
(container.py, role "ephemeral": never restarted), so logs, exec and attach reach it
by name.
"""

from __future__ import annotations

import dataclasses
import os

from vkpy.providers.base import ContainerConfig, PodConfig
from vkpy.providers.errors import InvalidInputError
from vkpy.providers.process.config import RunAs
from vkpy.providers.process.filesystem import PRIVATE, TRAVERSE, prepare_root
from vkpy.providers.process.layout import PodDir
from vkpy.providers.process.validation import check_container


def target_of(container: ContainerConfig) -> str | None:
    return str(container.spec.get("targetContainerName") or "") or None


def ephemeral_config(pod: PodConfig, container: ContainerConfig) -> ContainerConfig:
    """What to run for `container`, in its target's context; InvalidInputError when it
    cannot run here (no command, unknown target, ...)."""
    check_container(container, {v.name for v in pod.volumes})
    target_name = target_of(container)
    if target_name is None:
        return container
    target = next(
        (c for c in (*pod.init_containers, *pod.containers) if c.name == target_name), None
    )
    if target is None:
        raise InvalidInputError(
            f'target container "{target_name}" of ephemeral container "{container.name}" '
            "is not in the pod",
            reason="InvalidTarget",
        )
    env = dict(target.env)
    for name, value in container.env:
        env.pop(name, None)
        env[name] = value
    return dataclasses.replace(
        container,
        env=tuple(env.items()),
        working_dir=container.working_dir or target.working_dir,
    )


def prepare_ephemeral_root(
    pod_dir: PodDir, pod: PodConfig, container: ContainerConfig, run_as: RunAs, pod_view: bool
) -> None:
    """The ephemeral container's directory; its root is its target's (a link)."""
    target = target_of(container)
    if target is None:
        prepare_root(pod_dir, container, {v.name: v for v in pod.volumes}, run_as, pod_view)
        return
    cdir = pod_dir.container(container.name)
    cdir.path.mkdir(mode=TRAVERSE, exist_ok=True)
    os.chmod(cdir.path, TRAVERSE)
    cdir.instances.mkdir(mode=PRIVATE, exist_ok=True)
    os.chmod(cdir.instances, PRIVATE)
    if not cdir.root.is_symlink():
        os.symlink(os.path.join("..", target, "root"), cdir.root)
