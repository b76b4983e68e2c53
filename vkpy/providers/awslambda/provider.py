"""The `lambda` backend: pods as Lambda functions, through aiobotocore.

Lifecycle calls map onto the Lambda API (CreateFunction, GetFunction,
UpdateFunctionConfiguration/Code, DeleteFunction); `kubectl logs` reads CloudWatch
Logs; `kubectl exec -- invoke '<json>'` invokes. A function has no process that
changes state on its own, so this backend does not push status: the pod controller
polls `get_pod_status`. Functions are found again after a restart by their tags.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
from collections.abc import AsyncIterator, Sequence
from typing import Literal

from vkpy.providers import owner_tags
from vkpy.providers.aws.clients import AwsClients, AwsObject
from vkpy.providers.aws.cloudwatch_logs import FollowPolicy, LogSource, read_logs
from vkpy.providers.aws.naming import PREFIX, function_name
from vkpy.providers.aws.retry import AwsApiError, not_found
from vkpy.providers.aws.settings import aws_node_info
from vkpy.providers.awslambda import function_spec, invoke
from vkpy.providers.awslambda.config import LambdaConfig
from vkpy.providers.awslambda.function_spec import FunctionSpec
from vkpy.providers.awslambda.status import pod_state
from vkpy.providers.base import (
    LogQuery,
    LogRecord,
    NodeInfo,
    NodeResources,
    PodConfig,
    PodRef,
    PodState,
    StreamIO,
)
from vkpy.providers.errors import (
    InvalidInputError,
    NotFoundError,
    ProviderError,
    RetryableError,
)

log = logging.getLogger(__name__)

LIST_CONCURRENCY = 8


def _pod_error(error: ProviderError, ref: PodRef) -> ProviderError:
    """AWS's answer in the pod's terms: not found, invalid input, or as is."""
    if not_found(error):
        return NotFoundError(f"no Lambda function for pod {ref}")
    if isinstance(error, AwsApiError) and error.invalid_input:
        return InvalidInputError(str(error), reason="InvalidFunction")
    if isinstance(error, AwsApiError) and error.code == "ResourceConflictException":
        return RetryableError(str(error), reason="FunctionBusy")
    return error


class LambdaProvider:
    """Pods as Lambda functions. See the module docstring."""

    name = "lambda"
    reads_volume_files: Literal[True] = True
    """It takes function code from a ConfigMap volume."""

    def __init__(self, config: LambdaConfig, node_name: str, clients: AwsClients | None = None):
        self._config = config
        self._node = node_name
        self._clients = clients or AwsClients(config.aws, ("lambda", "logs"))

    # --- the backend --------------------------------------------------------------

    async def start(self) -> None:
        await self._clients.start()

    async def close(self) -> None:
        await self._clients.close()

    def node_info(self) -> NodeInfo:
        return aws_node_info(
            "lambda", f"AWS Lambda ({self._clients.region or self._config.aws.region or '-'})"
        )

    def node_resources(self) -> NodeResources:
        return self._config.aws.node_resources()

    async def ping(self) -> None:
        await self._clients.call("lambda", "get_account_settings")

    # --- pods ---------------------------------------------------------------------

    async def create_pod(self, pod: PodConfig) -> None:
        spec = function_spec.build(pod, self._config, self._node)
        try:
            await self._clients.call("lambda", "create_function", **spec.create_params())
        except AwsApiError as error:
            if error.code != "ResourceConflictException":
                raise _pod_error(error, pod.ref) from error
            existing = await self._function(pod.ref)  # created by an earlier attempt?
            if existing is None:
                raise RetryableError(str(error), reason="FunctionBusy") from error
        except ProviderError as error:
            raise _pod_error(error, pod.ref) from error
        log.info(
            "function created",
            extra={"pod": str(pod.ref), "uid": pod.ref.uid, "function": spec.name},
        )

    async def update_pod(self, pod: PodConfig) -> None:
        spec = function_spec.build(pod, self._config, self._node)
        found = await self._function(pod.ref)
        if found is None:
            raise NotFoundError(f"no Lambda function for pod {pod.ref}")
        configuration, current_tags = found
        try:
            changes = function_spec.configuration_changes(spec, configuration)
            if changes:
                await self._clients.call(
                    "lambda", "update_function_configuration", FunctionName=spec.name, **changes
                )
            if current_tags.get(function_spec.CODE_TAG) != spec.tags.get(function_spec.CODE_TAG):
                await self._clients.call(
                    "lambda", "update_function_code", FunctionName=spec.name, **dict(spec.code)
                )
            await self._retag(configuration, spec, current_tags)
        except ProviderError as error:
            raise _pod_error(error, pod.ref) from error
        log.info("function updated", extra={"pod": str(pod.ref), "function": spec.name})

    async def _retag(
        self, configuration: AwsObject, spec: FunctionSpec, current: dict[str, str]
    ) -> None:
        arn = str(configuration.get("FunctionArn") or "")
        stale = [k for k in current if k not in spec.tags and k.startswith(owner_tags.PREFIX)]
        if stale:
            await self._clients.call("lambda", "untag_resource", Resource=arn, TagKeys=stale)
        if {k: current.get(k) for k in spec.tags} != dict(spec.tags):
            await self._clients.call("lambda", "tag_resource", Resource=arn, Tags=dict(spec.tags))

    async def delete_pod(self, ref: PodRef, grace_period: float) -> None:
        found = await self._function(ref)
        if found is None:
            raise NotFoundError(f"no Lambda function for pod {ref}")
        try:
            await self._clients.call("lambda", "delete_function", FunctionName=function_name(ref))
        except ProviderError as error:
            raise _pod_error(error, ref) from error
        log.info("function deleted", extra={"pod": str(ref), "uid": ref.uid})

    async def get_pod_status(self, ref: PodRef) -> PodState:
        found = await self._function(ref)
        if found is None:
            raise NotFoundError(f"no Lambda function for pod {ref}")
        configuration, function_tags = found
        note = function_tags.get(function_spec.NOTE_TAG)
        state = pod_state(
            configuration,
            container=function_tags.get(function_spec.CONTAINER_TAG, "function"),
            image=str(
                configuration.get("ImageUri") or function_tags.get(function_spec.CODE_TAG, "")
            ),
            note=note,
        )
        return dataclasses.replace(state, warnings=(note,) if note else ())

    async def list_pods(self) -> Sequence[PodRef]:
        candidates: list[str] = []
        marker: str | None = None
        while True:
            params: dict[str, object] = {"MaxItems": 50}
            if marker:
                params["Marker"] = marker
            page = await self._clients.call("lambda", "list_functions", **params)
            for function in page.get("Functions") or []:
                if str(function.get("FunctionName", "")).startswith(PREFIX):
                    candidates.append(str(function["FunctionArn"]))
            marker = page.get("NextMarker")
            if not marker:
                break
        limit = asyncio.Semaphore(LIST_CONCURRENCY)

        async def owner(arn: str) -> PodRef | None:
            async with limit:
                try:
                    answer = await self._clients.call("lambda", "list_tags", Resource=arn)
                except ProviderError as error:
                    if not_found(error):
                        return None
                    raise
            return owner_tags.owner(answer.get("Tags") or {}, self._node)

        owners = await asyncio.gather(*(owner(arn) for arn in candidates))
        refs = [ref for ref in owners if ref is not None]
        log.info("functions of this node", extra={"functions": len(refs)})
        return refs

    async def _function(self, ref: PodRef) -> tuple[AwsObject, dict[str, str]] | None:
        """The pod's function configuration and tags, or None when it has none."""
        try:
            answer = await self._clients.call(
                "lambda", "get_function", FunctionName=function_name(ref)
            )
        except ProviderError as error:
            if not_found(error):
                return None
            raise
        function_tags = {str(k): str(v) for k, v in (answer.get("Tags") or {}).items()}
        if function_tags.get(owner_tags.UID) != ref.uid:
            return None  # not this pod's (never touch what vkpy did not make for it)
        configuration: AwsObject = dict(answer.get("Configuration") or {})
        if "ImageUri" in (answer.get("Code") or {}):
            configuration["ImageUri"] = answer["Code"]["ImageUri"]
        return configuration, function_tags

    # --- logs and exec ------------------------------------------------------------

    async def _check_container(self, ref: PodRef, container: str) -> str:
        found = await self._function(ref)
        if found is None:
            raise NotFoundError(f"no Lambda function for pod {ref}")
        _, function_tags = found
        expected = function_tags.get(function_spec.CONTAINER_TAG)
        if expected and container and container != expected:
            raise NotFoundError(f"pod {ref} has no container {container!r}")
        return function_name(ref)

    async def container_logs(self, ref: PodRef, query: LogQuery) -> AsyncIterator[LogRecord]:
        name = await self._check_container(ref, query.container)
        if query.previous:
            raise NotFoundError(
                f"previous terminated container {query.container!r} in pod {ref} not found"
            )

        async def ended() -> bool:
            return await self._function(ref) is None

        async for record in read_logs(
            self._clients,
            LogSource(group=f"/aws/lambda/{name}"),
            query,
            ended=ended,
            follow_policy=FollowPolicy(maximum=self._config.log_poll_max),
        ):
            yield record

    async def exec_in_container(
        self, ref: PodRef, container: str, command: Sequence[str], io: StreamIO
    ) -> int:
        name = await self._check_container(ref, container)

        async def call(payload: bytes) -> invoke.InvokeResult:
            answer = await self._clients.call_once(
                "lambda",
                "invoke",
                FunctionName=name,
                InvocationType="RequestResponse",
                Payload=payload,
            )
            body = answer.get("Payload") or b""
            error = answer.get("FunctionError")
            return invoke.InvokeResult(
                payload=body if isinstance(body, bytes) else str(body).encode(),
                function_error=str(error) if error else None,
            )

        return await invoke.run(command, io, call)
