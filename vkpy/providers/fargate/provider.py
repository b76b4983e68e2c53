"""The `fargate` backend: pods as ECS tasks on Fargate, through aiobotocore.

create registers the pod's task definition (reusing one already registered with the
same content) and runs a task; delete stops it, waits for it to stop and
deregisters the definition. A monitor describes every task of the node in batches
each `poll_interval` and tells the pod controller which pods changed (so this
backend pushes status), and it re-runs stopped tasks per restartPolicy after their
back-off. `kubectl logs` reads the awslogs streams of the current (or previous) task.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import time
from collections.abc import AsyncIterator, Sequence
from datetime import datetime

from vkpy.providers import owner_tags
from vkpy.providers.aws import tags
from vkpy.providers.aws.clients import AwsClients, AwsObject
from vkpy.providers.aws.cloudwatch_logs import FollowPolicy, LogSource, read_logs
from vkpy.providers.aws.retry import AwsApiError, not_found
from vkpy.providers.aws.settings import aws_node_info
from vkpy.providers.base import (
    BackgroundTask,
    LogQuery,
    LogRecord,
    NodeInfo,
    NodeResources,
    PodConfig,
    PodRef,
    PodState,
    StatusCallback,
    StreamIO,
)
from vkpy.providers.errors import (
    InvalidInputError,
    NotFoundError,
    ProviderError,
    UnsupportedError,
)
from vkpy.providers.fargate import records, status, task_definition
from vkpy.providers.fargate.config import FargateConfig
from vkpy.providers.fargate.ecs import Ecs
from vkpy.providers.fargate.exec import Exec, exec_disabled
from vkpy.providers.fargate.records import PodTasks
from vkpy.providers.fargate.status import STOPPED

log = logging.getLogger(__name__)


def _pod_error(error: ProviderError, ref: PodRef) -> ProviderError:
    if isinstance(error, AwsApiError) and error.invalid_input:
        return InvalidInputError(str(error), reason="InvalidTask")
    if not_found(error):
        return NotFoundError(f"no ECS task for pod {ref}")
    return error


class FargateProvider:
    """Pods as Fargate tasks. See the module docstring."""

    name = "fargate"

    def __init__(
        self, config: FargateConfig, node_name: str, clients: AwsClients | None = None
    ) -> None:
        self._config = config
        self._node = node_name
        services = ("ecs", "logs", "ssm") if config.enable_execute_command else ("ecs", "logs")
        self._clients = clients or AwsClients(config.aws, services)
        self._ecs = Ecs(self._clients, config, node_name)
        self._exec = Exec(self._clients, config.cluster)
        self._pods: dict[str, PodTasks] = {}
        self._callback: StatusCallback | None = None

    # --- the backend --------------------------------------------------------------

    def on_status_change(self, callback: StatusCallback) -> None:
        self._callback = callback

    async def start(self) -> None:
        await self._clients.start()

    def background_tasks(self) -> Sequence[BackgroundTask]:
        """The monitor, run and restarted by the kubelet side."""
        return (BackgroundTask("fargate-monitor", self._watch),)

    async def close(self) -> None:
        await self._clients.close()

    def node_info(self) -> NodeInfo:
        return aws_node_info(
            "fargate", f"AWS Fargate (cluster {self._config.cluster}, {self._clients.region})"
        )

    def node_resources(self) -> NodeResources:
        return self._config.aws.node_resources()

    async def ping(self) -> None:
        if not await self._ecs.cluster_active():
            raise ProviderError(f"ECS cluster {self._config.cluster} is not active")

    def _notify(self, ref: PodRef) -> None:
        if self._callback is not None:
            self._callback(ref)

    # --- pods ---------------------------------------------------------------------

    async def create_pod(self, pod: PodConfig) -> None:
        existing = self._pods.get(pod.ref.uid)
        if existing is not None and existing.task_arn is not None:
            return
        spec = task_definition.build(pod, self._config, self._node, self._clients.region)
        try:
            await self._ecs.ensure_log_group()
            definition_arn = await self._definition(spec)
            restarts = existing.restarts if existing else 0
            task = await self._ecs.run(
                definition_arn, self._task_tags(spec, restarts), f"{pod.ref.uid}-{restarts}"
            )
        except ProviderError as error:
            raise _pod_error(error, pod.ref) from error
        record = PodTasks(
            ref=pod.ref,
            definition_arn=definition_arn,
            shape=records.shape_of(dict(spec.params)),
            restart_policy=pod.restart_policy,
            digest=spec.digest,
            note="; ".join(spec.notes) or None,
            task_arn=str(task["taskArn"]),
            task=task,
            restarts=restarts,
        )
        self._pods[pod.ref.uid] = record
        log.info(
            "task started",
            extra={"pod": str(pod.ref), "uid": pod.ref.uid, "task": record.task_arn},
        )

    def _task_tags(self, spec: task_definition.TaskDefinitionSpec, restarts: int) -> dict[str, str]:
        task_tags = dict(spec.tags)
        task_tags[task_definition.RESTARTS_TAG] = str(restarts)
        return task_tags

    async def _definition(self, spec: task_definition.TaskDefinitionSpec) -> str:
        """The ARN of a registered definition with this content (registering one if none)."""
        found = await self._ecs.definition(spec.family)
        if found is not None:
            definition, definition_tags = found
            same = definition_tags.get(task_definition.SPEC_TAG) == spec.digest
            if same and definition_tags.get(owner_tags.UID) == spec.tags.get(owner_tags.UID):
                return str(definition["taskDefinitionArn"])
        return await self._ecs.register(spec.register_params())

    async def update_pod(self, pod: PodConfig) -> None:
        record = self._pods.get(pod.ref.uid)
        if record is None:
            raise NotFoundError(f"no ECS task for pod {pod.ref}")
        spec = task_definition.build(pod, self._config, self._node, self._clients.region)
        if spec.digest == record.digest:
            return
        async with record.lock:
            try:
                definition_arn = await self._definition(spec)
                old_definition = record.definition_arn
                if record.task_arn:
                    await self._ecs.stop(record.task_arn, "pod spec changed")
                    await self._wait_stopped(record, self._config.stop_wait)
                task = await self._ecs.run(
                    definition_arn,
                    self._task_tags(spec, record.restarts + 1),
                    f"{pod.ref.uid}-{record.restarts + 1}",
                )
            except ProviderError as error:
                raise _pod_error(error, pod.ref) from error
            record.ran_again(task)
            record.definition_arn = definition_arn
            record.digest = spec.digest
            record.shape = records.shape_of(dict(spec.params))
            if old_definition != definition_arn:
                await self._ecs.deregister(old_definition)
        log.info("task replaced for a changed spec", extra={"pod": str(pod.ref)})

    async def delete_pod(self, ref: PodRef, grace_period: float) -> None:
        record = self._pods.get(ref.uid)
        if record is None:
            raise NotFoundError(f"no ECS task for pod {ref}")
        async with record.lock:
            record.deleting = True
            record.next_run_at = None
            try:
                if record.task_arn and (record.task or {}).get("lastStatus") != STOPPED:
                    await self._ecs.stop(record.task_arn, "pod deleted")
                    wait = min(grace_period, task_definition.STOP_TIMEOUT_MAX)
                    await self._wait_stopped(record, wait + self._config.stop_wait)
                await self._ecs.deregister(record.definition_arn)
            except ProviderError as error:
                record.deleting = False
                raise _pod_error(error, ref) from error
        self._pods.pop(ref.uid, None)
        log.info("task stopped and definition deregistered", extra={"pod": str(ref)})

    async def _wait_stopped(self, record: PodTasks, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        delay = 0.2
        while record.task_arn:
            task = (await self._ecs.describe([record.task_arn])).get(record.task_arn)
            if task is None or task.get("lastStatus") == STOPPED:
                if task is not None:
                    record.task = task
                return
            if time.monotonic() + delay > deadline:
                log.warning("task did not stop in time", extra={"task": record.task_arn})
                return
            await asyncio.sleep(delay)
            delay = min(delay * 2, 2.0)

    async def get_pod_status(self, ref: PodRef) -> PodState:
        record = self._pods.get(ref.uid)
        if record is None or record.task_arn is None:
            raise NotFoundError(f"no ECS task for pod {ref}")
        task = (await self._ecs.describe([record.task_arn])).get(record.task_arn)
        if task is None and record.task is None:
            raise NotFoundError(f"ECS no longer knows the task of pod {ref}")
        record.observe(
            task, time.time(), self._config.restart_backoff, self._config.restart_backoff_max
        )
        assert record.task is not None
        state = status.pod_state(record.task, record.shape, record.restart_view(), record.note)
        return dataclasses.replace(state, warnings=(record.note,) if record.note else ())

    async def list_pods(self) -> Sequence[PodRef]:
        tasks = await self._ecs.describe(await self._ecs.task_arns(), with_tags=True)
        latest: dict[str, tuple[PodRef, AwsObject]] = {}
        for task in tasks.values():
            ref = owner_tags.owner(tags.from_list(task.get("tags")), self._node)
            if ref is None:
                continue
            known = latest.get(ref.uid)
            if known is None or _created(task) >= _created(known[1]):
                latest[ref.uid] = (ref, task)
        definitions = await self._ecs.definitions(
            [str(t.get("taskDefinitionArn")) for _, t in latest.values()]
        )
        for ref, task in latest.values():
            found = definitions.get(str(task.get("taskDefinitionArn")))
            if found is None:
                continue
            deleted = found[0].get("status") == "INACTIVE" and task.get("lastStatus") == STOPPED
            if not deleted:  # a deregistered definition and a stopped task: a deleted pod
                self._adopt(ref, found[0], found[1], task)
        families = await self._ecs.definitions(await self._ecs.families())
        for definition, definition_tags in families.values():
            ref = owner_tags.owner(definition_tags, self._node)
            active = definition.get("status", "ACTIVE") == "ACTIVE"
            if ref is not None and active and ref.uid not in self._pods:
                self._adopt(ref, definition, definition_tags, None)
        log.info("tasks of this node", extra={"pods": len(self._pods)})
        return [r.ref for r in self._pods.values()]

    def _adopt(
        self,
        ref: PodRef,
        definition: AwsObject,
        definition_tags: dict[str, str],
        task: AwsObject | None,
    ) -> None:
        if ref.uid not in self._pods:
            self._pods[ref.uid] = records.from_aws(ref, definition, definition_tags, task)

    # --- the monitor --------------------------------------------------------------

    async def _watch(self) -> None:
        """Describe the node's tasks every poll_interval; a transient AWS error is
        logged and the next round tried; anything else ends the monitor, which its
        supervisor logs and restarts."""
        while True:
            await asyncio.sleep(self._config.poll_interval)
            try:
                await self._refresh()
            except ProviderError as error:
                log.warning("describing tasks failed", extra={"error": str(error)})

    async def _refresh(self) -> None:
        current = [r for r in self._pods.values() if r.task_arn and not r.deleting and r.live()]
        tasks = await self._ecs.describe([r.task_arn for r in current if r.task_arn])
        now = time.time()
        for record in current:
            assert record.task_arn is not None
            changed = record.observe(
                tasks.get(record.task_arn),
                now,
                self._config.restart_backoff,
                self._config.restart_backoff_max,
            )
            if record.next_run_at is not None and now >= record.next_run_at:
                changed = await self._run_again(record) or changed
            if changed:
                self._notify(record.ref)

    async def _run_again(self, record: PodTasks) -> bool:
        async with record.lock:
            if record.deleting or record.next_run_at is None:
                return False
            found = await self._ecs.definition(record.definition_arn)
            task_tags = dict(found[1]) if found else tags.pod_tags(self._node, record.ref)
            task_tags[task_definition.RESTARTS_TAG] = str(record.restarts + 1)
            try:
                task = await self._ecs.run(
                    record.definition_arn, task_tags, f"{record.ref.uid}-{record.restarts + 1}"
                )
            except ProviderError as error:
                log.warning(
                    "re-running task failed, will retry",
                    extra={"pod": str(record.ref), "error": str(error)},
                )
                return False
            record.ran_again(task)
        log.info(
            "task restarted",
            extra={"pod": str(record.ref), "restarts": record.restarts, "task": record.task_arn},
        )
        return True

    # --- logs ---------------------------------------------------------------------

    async def container_logs(self, ref: PodRef, query: LogQuery) -> AsyncIterator[LogRecord]:
        record = self._pods.get(ref.uid)
        if record is None:
            raise NotFoundError(f"no ECS task for pod {ref}")
        shape = record.shape
        if query.container not in (*shape.app, *shape.init):
            raise NotFoundError(f"pod {ref} has no container {query.container!r}")
        arn = record.previous_task_arn if query.previous else record.task_arn
        if not arn:
            raise NotFoundError(
                f"previous terminated container {query.container!r} in pod {ref} not found"
            )
        family = str(record.definition_arn.rsplit("/", 1)[-1]).split(":")[0]
        stream = f"{family}/{query.container}/{arn.rsplit('/', 1)[-1]}"

        async def ended() -> bool:
            if query.previous or record.deleting or ref.uid not in self._pods:
                return True
            task = (await self._ecs.describe([arn])).get(arn)
            return task is None or task.get("lastStatus") == STOPPED

        async for line in read_logs(
            self._clients,
            LogSource(group=self._config.log_group, streams=(stream,)),
            query,
            ended=ended,
            follow_policy=FollowPolicy(maximum=self._config.log_poll_max),
        ):
            yield line

    # --- exec ---------------------------------------------------------------------

    async def exec_in_container(
        self, ref: PodRef, container: str, command: Sequence[str], io: StreamIO
    ) -> int:
        """Through ECS Exec (see vkpy.providers.fargate.exec)."""
        record = self._pods.get(ref.uid)
        if record is None or record.task_arn is None:
            raise NotFoundError(f"no ECS task for pod {ref}")
        if container not in record.shape.app:
            raise NotFoundError(f"pod {ref} has no container {container!r}")
        if not self._config.enable_execute_command:
            raise exec_disabled()
        task = (await self._ecs.describe([record.task_arn])).get(record.task_arn) or record.task
        last = (task or {}).get("lastStatus")
        desired = (task or {}).get("desiredStatus")
        if last != "RUNNING" or desired == STOPPED:
            state = "stopping" if desired == STOPPED and last != STOPPED else str(last).lower()
            raise ProviderError(
                f"cannot exec in pod {ref}: its ECS task is {state} "
                f"(ECS Exec needs a RUNNING task)",
                reason="TaskNotRunning",
            )
        return await self._exec.run(record.task_arn, container, command, io)

    async def attach_to_container(self, ref: PodRef, container: str, io: StreamIO) -> int | None:
        """ECS Exec only starts new processes: it cannot reach the main process's stdio."""
        if ref.uid not in self._pods:
            raise NotFoundError(f"no ECS task for pod {ref}")
        raise UnsupportedError(
            "kubectl attach is not possible on fargate pods: ECS Exec starts new processes "
            "and cannot connect to the container's main process. Use `kubectl logs -f` for "
            "its output, or `kubectl exec -it <pod> -- sh` for a shell in the container",
            reason="AttachUnsupported",
        )


def _created(task: AwsObject) -> float:
    created = task.get("createdAt")
    return created.timestamp() if isinstance(created, datetime) else 0.0
