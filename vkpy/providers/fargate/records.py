"""What the fargate backend remembers of each pod, and when a stopped task runs again.

A pod's record holds its task definition, its current task (as last described), how
many runs came before, how they ended, and when the next run is due. All of it can
be rebuilt from AWS after a restart (the task definition's containers and tags, the
latest task and its `restarts` tag), so the record is a cache, not the truth. The
restart rules are the kubelet's: Always re-runs any stopped task, OnFailure one that
failed, with a back-off that doubles per restart up to a maximum.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field

from vkpy.providers.aws import tags
from vkpy.providers.aws.clients import AwsObject
from vkpy.providers.base import ContainerState, PodRef
from vkpy.providers.fargate import status
from vkpy.providers.fargate.status import Restart, TaskShape
from vkpy.providers.fargate.task_definition import (
    NOTE_TAG,
    RESTART_POLICY_TAG,
    RESTARTS_TAG,
    SPEC_TAG,
)


@dataclass
class PodTasks:
    """One pod's task definition and runs."""

    ref: PodRef
    definition_arn: str
    shape: TaskShape
    restart_policy: str = "Always"
    digest: str = ""
    note: str | None = None
    task_arn: str | None = None
    task: AwsObject | None = None
    previous_task_arn: str | None = None
    restarts: int = 0
    last: dict[str, ContainerState] = field(default_factory=dict)
    next_run_at: float | None = None
    backoff: float = 0.0
    deleting: bool = False
    lock: asyncio.Lock = field(default_factory=asyncio.Lock, repr=False)

    def fingerprint(self) -> tuple[object, ...]:
        """What, when it changes, may change the pod's status."""
        task = self.task or {}
        containers = tuple(
            (c.get("name"), c.get("lastStatus"), c.get("exitCode"))
            for c in task.get("containers") or []
        )
        return (
            self.task_arn,
            task.get("lastStatus"),
            containers,
            status.pod_ip(task),
            self.next_run_at is not None,
        )

    def live(self) -> bool:
        """Whether the task can still change: not stopped for good (no run to come)."""
        stopped = (self.task or {}).get("lastStatus") == status.STOPPED
        return not stopped or self.next_run_at is not None

    def wants_restart(self, task: AwsObject) -> bool:
        if self.deleting or task.get("lastStatus") != status.STOPPED:
            return False
        if self.restart_policy == "Always":
            return True
        return self.restart_policy == "OnFailure" and not status.succeeded(task, self.shape)

    def observe(self, task: AwsObject | None, now: float, base: float, maximum: float) -> bool:
        """Take a fresh description of the current task; True when the status may differ."""
        before = self.fingerprint()
        latest = task if task is not None else self.task
        # Decided before anything is recorded: a description this raises on leaves the
        # record as it was (still live), so the next round describes the task again.
        restart = latest is not None and self.next_run_at is None and self.wants_restart(latest)
        self.task = latest
        if restart:
            self.backoff = min(maximum, base * (2**self.restarts))
            self.next_run_at = now + self.backoff
        return self.fingerprint() != before

    def restart_view(self) -> Restart:
        return Restart(
            count=self.restarts,
            last=dict(self.last),
            waiting=self.backoff if self.next_run_at is not None else None,
        )

    def ran_again(self, task: AwsObject) -> None:
        """The next run started: the ended run becomes the last state."""
        if self.task is not None:
            images = self.shape.images
            self.last = {
                n: status.terminated(self.task, n, images.get(n, "")) for n in self.shape.app
            }
        self.previous_task_arn = self.task_arn
        self.task_arn = str(task.get("taskArn"))
        self.task = task
        self.restarts += 1
        self.next_run_at = None


def shape_of(definition: AwsObject) -> TaskShape:
    """The pod's containers from its task definition: essential ones are app containers."""
    containers = definition.get("containerDefinitions") or []
    return TaskShape(
        app=tuple(str(c["name"]) for c in containers if c.get("essential", True)),
        init=tuple(str(c["name"]) for c in containers if not c.get("essential", True)),
        images={str(c["name"]): str(c.get("image", "")) for c in containers},
    )


def from_aws(
    ref: PodRef,
    definition: AwsObject,
    definition_tags: dict[str, str],
    task: AwsObject | None,
) -> PodTasks:
    """A record rebuilt from what AWS holds (adoption after a restart)."""
    task_tags = tags.from_list((task or {}).get("tags"))
    try:
        restarts = int(task_tags.get(RESTARTS_TAG, "0"))
    except ValueError:
        restarts = 0
    return PodTasks(
        ref=ref,
        definition_arn=str(definition.get("taskDefinitionArn", "")),
        shape=shape_of(definition),
        restart_policy=definition_tags.get(RESTART_POLICY_TAG, "Always"),
        digest=definition_tags.get(SPEC_TAG, ""),
        note=definition_tags.get(NOTE_TAG) or None,
        task_arn=str(task["taskArn"]) if task else None,
        task=task,
        restarts=restarts,
    )
