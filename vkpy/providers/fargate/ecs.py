"""The ECS and CloudWatch Logs calls the fargate backend makes, typed and batched.

Kept apart from the provider so the provider reads as the pod lifecycle, and so the
API's particulars live in one place: DescribeTasks takes at most 100 tasks, RunTask
reports capacity problems as `failures` rather than errors, task definitions are
found by family prefix, and the awslogs group must exist before a task logs to it.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

from vkpy.providers.aws import naming, tags
from vkpy.providers.aws.clients import AwsClients, AwsObject
from vkpy.providers.aws.retry import AwsApiError, not_found
from vkpy.providers.errors import ProviderError, RetryableError
from vkpy.providers.fargate.config import FargateConfig

DESCRIBE_BATCH = 100
LOOKUP_CONCURRENCY = 8


class Ecs:
    """ECS for one node: its cluster, its `startedBy`, its network configuration."""

    def __init__(self, clients: AwsClients, config: FargateConfig, node: str) -> None:
        self._clients = clients
        self._config = config
        self._started_by = naming.started_by(node)
        self._log_group_ready = False

    async def cluster_active(self) -> bool:
        answer = await self._clients.call(
            "ecs", "describe_clusters", clusters=[self._config.cluster]
        )
        clusters = answer.get("clusters") or []
        return bool(clusters) and clusters[0].get("status") == "ACTIVE"

    async def ensure_log_group(self) -> None:
        if self._log_group_ready:
            return
        try:
            await self._clients.call(
                "logs", "create_log_group", logGroupName=self._config.log_group
            )
        except AwsApiError as error:
            if error.code != "ResourceAlreadyExistsException":
                raise
        self._log_group_ready = True

    async def register(self, params: dict[str, object]) -> str:
        answer = await self._clients.call("ecs", "register_task_definition", **params)
        return str(answer["taskDefinition"]["taskDefinitionArn"])

    async def definition(self, name: str) -> tuple[AwsObject, dict[str, str]] | None:
        """A task definition (family, family:revision or ARN) and its tags, if it exists."""
        try:
            answer = await self._clients.call(
                "ecs", "describe_task_definition", taskDefinition=name, include=["TAGS"]
            )
        except ProviderError as error:
            if not_found(error) or (isinstance(error, AwsApiError) and error.invalid_input):
                return None  # ECS says ClientException for an unknown family
            raise
        return dict(answer.get("taskDefinition") or {}), tags.from_list(answer.get("tags"))

    async def deregister(self, arn: str) -> None:
        try:
            await self._clients.call("ecs", "deregister_task_definition", taskDefinition=arn)
        except ProviderError as error:
            if not (not_found(error) or (isinstance(error, AwsApiError) and error.invalid_input)):
                raise

    async def run(self, definition_arn: str, task_tags: dict[str, str], token: str) -> AwsObject:
        network: dict[str, object] = {
            "subnets": list(self._config.subnets),
            "assignPublicIp": "ENABLED" if self._config.assign_public_ip else "DISABLED",
        }
        if self._config.security_groups:
            network["securityGroups"] = list(self._config.security_groups)
        params: dict[str, object] = {
            "cluster": self._config.cluster,
            "taskDefinition": definition_arn,
            "launchType": "FARGATE",
            "count": 1,
            "startedBy": self._started_by,
            "networkConfiguration": {"awsvpcConfiguration": network},
            "tags": tags.as_list(task_tags),
            "clientToken": token[:64],
        }
        if self._config.enable_execute_command:
            params["enableExecuteCommand"] = True
        if self._config.platform_version:
            params["platformVersion"] = self._config.platform_version
        answer = await self._clients.call("ecs", "run_task", **params)
        started = answer.get("tasks") or []
        if not started:
            failures = answer.get("failures") or [{}]
            reason = failures[0].get("reason") or "no task started"
            detail = failures[0].get("detail") or ""
            raise RetryableError(f"RunTask: {reason} {detail}".strip(), reason="TaskNotStarted")
        return dict(started[0])

    async def stop(self, arn: str, reason: str) -> None:
        try:
            await self._clients.call(
                "ecs", "stop_task", cluster=self._config.cluster, task=arn, reason=reason[:255]
            )
        except ProviderError as error:
            if not (not_found(error) or (isinstance(error, AwsApiError) and error.invalid_input)):
                raise

    async def describe(self, arns: Sequence[str], with_tags: bool = False) -> dict[str, AwsObject]:
        """Tasks by ARN; ARNs ECS no longer knows are missing from the answer."""
        found: dict[str, AwsObject] = {}
        unique = list(dict.fromkeys(arns))
        for start in range(0, len(unique), DESCRIBE_BATCH):
            params: dict[str, object] = {
                "cluster": self._config.cluster,
                "tasks": unique[start : start + DESCRIBE_BATCH],
            }
            if with_tags:
                params["include"] = ["TAGS"]
            answer = await self._clients.call("ecs", "describe_tasks", **params)
            for task in answer.get("tasks") or []:
                found[str(task.get("taskArn"))] = dict(task)
        return found

    async def task_arns(self) -> list[str]:
        """This node's tasks, running and recently stopped."""
        arns: list[str] = []
        for desired in ("RUNNING", "STOPPED"):
            token: str | None = None
            while True:
                params: dict[str, object] = {
                    "cluster": self._config.cluster,
                    "startedBy": self._started_by,
                    "desiredStatus": desired,
                }
                if token:
                    params["nextToken"] = token
                answer = await self._clients.call("ecs", "list_tasks", **params)
                arns.extend(str(a) for a in answer.get("taskArns") or [])
                token = answer.get("nextToken")
                if not token:
                    break
        return list(dict.fromkeys(arns))

    async def families(self) -> list[str]:
        """Active task definition families that vkpy may have made."""
        families: list[str] = []
        token: str | None = None
        while True:
            params: dict[str, object] = {"familyPrefix": naming.PREFIX, "status": "ACTIVE"}
            if token:
                params["nextToken"] = token
            answer = await self._clients.call("ecs", "list_task_definition_families", **params)
            families.extend(str(f) for f in answer.get("families") or [])
            token = answer.get("nextToken")
            if not token:
                break
        return families

    async def definitions(
        self, names: Sequence[str]
    ) -> dict[str, tuple[AwsObject, dict[str, str]]]:
        """Several task definitions (with tags) at once, by the name asked for."""
        limit = asyncio.Semaphore(LOOKUP_CONCURRENCY)

        async def one(name: str) -> tuple[str, tuple[AwsObject, dict[str, str]] | None]:
            async with limit:
                return name, await self.definition(name)

        answers = await asyncio.gather(*(one(n) for n in dict.fromkeys(names)))
        return {name: found for name, found in answers if found is not None}
