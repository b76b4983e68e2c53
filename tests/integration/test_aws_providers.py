"""The AWS backends called directly (no control plane) against moto: the mapping onto
functions and tasks, logs, invoke, adoption, and convergence under throttling.

Fast checks of what the agent tests (test_aws_agent.py) then show end to end.
"""
# ruff: noqa: F811 - pytest fixtures are imported by name and then requested as arguments

from __future__ import annotations

import asyncio
import contextlib
import json
import secrets
from typing import Any

import pytest

from tests.integration.aws_fixtures import (  # noqa: F401 - fixtures
    FargateSetup,
    LambdaSetup,
    aws,
    aws_proxy,
    fargate_setup,
    lambda_setup,
    moto,
)
from tests.integration.moto_server import Aws, AwsProxy, MotoServer, exit_code_rewrite
from vkpy.node.background import TaskSupervisor
from vkpy.providers.aws.naming import function_name, task_family
from vkpy.providers.awslambda import LambdaConfig, LambdaProvider
from vkpy.providers.base import (
    ContainerConfig,
    LogQuery,
    PodConfig,
    PodRef,
    StreamIO,
    VolumeConfig,
    VolumeFile,
)
from vkpy.providers.errors import NotFoundError, UnsupportedError
from vkpy.providers.fargate import FargateConfig, FargateProvider


def pod(
    name: str = "web",
    *,
    image: str = "123456789012.dkr.ecr.us-east-1.amazonaws.com/app:1",
    annotations: dict[str, str] | None = None,
    labels: dict[str, str] | None = None,
    resources: dict[str, Any] | None = None,
    env: tuple[tuple[str, str], ...] = (("GREETING", "hello"),),
    command: tuple[str, ...] = (),
    args: tuple[str, ...] = (),
    restart_policy: str = "Never",
    volumes: tuple[VolumeConfig, ...] = (),
    containers: int = 1,
) -> PodConfig:
    uid = secrets.token_hex(16)
    ref = PodRef("ns", name, uid)
    spec: dict[str, Any] = {"resources": resources or {}}
    manifest = {
        "metadata": {
            "name": name,
            "namespace": "ns",
            "uid": uid,
            "annotations": annotations or {},
            "labels": labels or {},
        },
        "spec": {"restartPolicy": restart_policy},
    }
    return PodConfig(
        ref=ref,
        pod=manifest,
        init_containers=(),
        containers=tuple(
            ContainerConfig(
                name="app" if i == 0 else f"app{i}",
                image=image,
                command=command,
                args=args,
                env=env,
                spec=spec,
            )
            for i in range(containers)
        ),
        volumes=volumes,
    )


class Sink:
    def __init__(self) -> None:
        self.data = b""

    async def write(self, data: bytes) -> None:
        self.data += data

    async def close(self) -> None:
        return None


# --- lambda -----------------------------------------------------------------------


async def test_lambda_function_mapped_from_pod(lambda_setup: LambdaSetup, aws: Aws) -> None:
    node = f"vk-{secrets.token_hex(3)}"
    provider = LambdaProvider(LambdaConfig.from_dict(lambda_setup.config()), node)
    await provider.start()
    try:
        config = pod(
            labels={"app": "web", "team": "a"},
            annotations={"vkpy.io/lambda-timeout": "60"},
            resources={"limits": {"memory": "64Mi"}},
            command=("/bin/handler",),
            args=("serve",),
        )
        await provider.create_pod(config)
        await provider.create_pod(config)  # idempotent
        state = await provider.get_pod_status(config.ref)
        assert state.phase == "Running"
        assert state.containers[0].ready
        assert state.message and "128 MB" in state.message  # clamped, and said so
        got = await aws.acall("lambda", "get_function", FunctionName=function_name(config.ref))
        fn = got["Configuration"]
        assert fn["MemorySize"] == 128
        assert fn["Timeout"] == 60
        assert fn["PackageType"] == "Image"
        assert fn["Role"] == lambda_setup.role_arn
        assert fn["Environment"]["Variables"] == {"GREETING": "hello"}
        assert got["Code"]["ImageUri"] == config.containers[0].image
        assert got["Tags"]["vkpy.io/node"] == node
        assert got["Tags"]["vkpy.io/pod-uid"] == config.ref.uid
        assert got["Tags"]["app"] == "web"
        assert await provider.list_pods() == [config.ref]
        await provider.delete_pod(config.ref, 30)
        with pytest.raises(NotFoundError):
            await provider.get_pod_status(config.ref)
        assert await provider.list_pods() == []
    finally:
        await provider.close()


async def test_lambda_zip_from_s3_and_configmap(lambda_setup: LambdaSetup, aws: Aws) -> None:
    provider = LambdaProvider(LambdaConfig.from_dict(lambda_setup.config()), "vk-zip")
    await provider.start()
    try:
        bucket = f"code-{secrets.token_hex(3)}"
        await asyncio.to_thread(aws.put_zip, bucket, "fn.zip", {"app.py": "def h(e, c): ..."})
        from_s3 = pod(
            "s3",
            annotations={
                "vkpy.io/lambda-runtime": "python3.12",
                "vkpy.io/lambda-handler": "app.h",
                "vkpy.io/lambda-code-s3": f"s3://{bucket}/fn.zip",
            },
        )
        await provider.create_pod(from_s3)
        fn = await aws.acall("lambda", "get_function", FunctionName=function_name(from_s3.ref))
        assert fn["Configuration"]["Runtime"] == "python3.12"
        assert fn["Configuration"]["Handler"] == "app.h"
        assert fn["Configuration"]["PackageType"] == "Zip"
        source = VolumeConfig(
            name="code",
            kind="configMap",
            source={"name": "fn-code"},
            files=(VolumeFile("app.py", b"def h(e, c):\n    return e\n"),),
        )
        from_map = pod(
            "cm",
            annotations={
                "vkpy.io/lambda-runtime": "python3.12",
                "vkpy.io/lambda-handler": "app.h",
                "vkpy.io/lambda-code-configmap": "fn-code",
            },
            volumes=(source,),
        )
        await provider.create_pod(from_map)
        state = await provider.get_pod_status(from_map.ref)
        assert state.phase == "Running"
    finally:
        await provider.close()


async def test_lambda_refuses_what_it_cannot_represent(lambda_setup: LambdaSetup) -> None:
    provider = LambdaProvider(LambdaConfig.from_dict(lambda_setup.config()), "vk-x")
    await provider.start()
    try:
        with pytest.raises(UnsupportedError, match="one container"):
            await provider.create_pod(pod(containers=2))
        hostpath = VolumeConfig(name="data", kind="hostPath", source={"path": "/data"})
        with pytest.raises(UnsupportedError, match="hostPath"):
            await provider.create_pod(pod(volumes=(hostpath,)))
    finally:
        await provider.close()


async def test_lambda_logs_and_invoke(
    lambda_setup: LambdaSetup, aws: Aws, moto: MotoServer
) -> None:
    provider = LambdaProvider(LambdaConfig.from_dict(lambda_setup.config()), "vk-logs")
    await provider.start()
    try:
        config = pod()
        await provider.create_pod(config)
        name = function_name(config.ref)
        await asyncio.to_thread(
            aws.put_logs, f"/aws/lambda/{name}", "2024/01/01/[$LATEST]abc", "one", "two", "three"
        )
        lines = [
            r.data async for r in provider.container_logs(config.ref, LogQuery(container="app"))
        ]
        assert lines == [b"one\n", b"two\n", b"three\n"]
        tail = [
            r.data
            async for r in provider.container_logs(
                config.ref, LogQuery(container="app", tail_lines=1)
            )
        ]
        assert tail == [b"three\n"]
        with pytest.raises(NotFoundError):
            async for _ in provider.container_logs(config.ref, LogQuery(container="other")):
                pass

        out, err = Sink(), Sink()
        code = await provider.exec_in_container(
            config.ref, "app", ["invoke", '{"x": 1}'], StreamIO(None, out, err, tty=False)
        )
        assert code == 0
        assert json.loads(out.data) == {"x": 1}  # moto's Lambda echoes without Docker
        await asyncio.to_thread(moto.queue_lambda_results, '{"answer": 42}')
        out = Sink()
        code = await provider.exec_in_container(
            config.ref, "app", ["invoke", "{}"], StreamIO(None, out, err, tty=False)
        )
        assert (code, json.loads(out.data)) == (0, {"answer": 42})
        out, err = Sink(), Sink()
        code = await provider.exec_in_container(
            config.ref, "app", ["ls", "/"], StreamIO(None, out, err, tty=False)
        )
        assert code == 126
        assert b"invoke" in err.data and out.data == b""
    finally:
        await provider.close()


async def test_lambda_converges_under_throttling(
    lambda_setup: LambdaSetup, aws_proxy: AwsProxy
) -> None:
    aws_proxy.throttle_rate = 0.4
    provider = LambdaProvider(LambdaConfig.from_dict(lambda_setup.config()), "vk-thr")
    await provider.start()
    try:
        pods = [pod(f"p{i}") for i in range(5)]
        for config in pods:
            await provider.create_pod(config)
        for config in pods:
            assert (await provider.get_pod_status(config.ref)).phase == "Running"
        assert sorted(await provider.list_pods()) == sorted(p.ref for p in pods)
        assert sum(aws_proxy.throttled.values()) > 0
    finally:
        await provider.close()


# --- fargate ----------------------------------------------------------------------


def supervised(provider: FargateProvider) -> asyncio.Task[None]:
    """Run the backend's background tasks as vkpy's runner does."""
    tasks = TaskSupervisor(first_delay=0.1)
    tasks.add_from(provider)
    return asyncio.create_task(tasks.run(), name="backend-tasks")


async def wait_phase(provider: FargateProvider, ref: PodRef, phase: str) -> Any:
    for _ in range(100):
        state = await provider.get_pod_status(ref)
        if state.phase == phase:
            return state
        await asyncio.sleep(0.1)
    raise AssertionError(f"{ref} never {phase}; last {state}")


async def test_fargate_task_mapped_from_pod(fargate_setup: FargateSetup, aws: Aws) -> None:
    node = f"vk-{secrets.token_hex(3)}"
    provider = FargateProvider(FargateConfig.from_dict(fargate_setup.config()), node)
    await provider.start()
    try:
        config = pod(
            image="busybox:1.36",
            command=("sh", "-c"),
            args=("echo hi",),
            resources={"requests": {"cpu": "300m", "memory": "600Mi"}},
            labels={"app": "batch"},
        )
        await provider.create_pod(config)
        state = await provider.get_pod_status(config.ref)
        assert state.phase == "Running"
        assert state.pod_ip and state.pod_ip.startswith("10.")  # the ENI's address
        assert state.message and "rounded up" in state.message
        family = task_family(config.ref)
        found = await aws.acall(
            "ecs", "describe_task_definition", taskDefinition=family, include=["TAGS"]
        )
        definition = found["taskDefinition"]
        assert (definition["cpu"], definition["memory"]) == ("512", "1024")
        assert definition["networkMode"] == "awsvpc"
        container = definition["containerDefinitions"][0]
        assert container["entryPoint"] == ["sh", "-c"]
        assert container["command"] == ["echo hi"]
        assert container["essential"] is True
        assert container["environment"] == [{"name": "GREETING", "value": "hello"}]
        assert container["logConfiguration"]["options"]["awslogs-group"] == (
            fargate_setup.log_group
        )
        tags = {t["key"]: t["value"] for t in found["tags"]}
        assert tags["vkpy.io/pod-uid"] == config.ref.uid
        assert tags["app"] == "batch"
        arns = await aws.acall("ecs", "list_tasks", cluster=fargate_setup.cluster)
        assert len(arns["taskArns"]) == 1

        task_arn = arns["taskArns"][0]
        await asyncio.to_thread(
            aws.put_logs,
            fargate_setup.log_group,
            f"{family}/app/{task_arn.rsplit('/', 1)[-1]}",
            "hello from fargate",
        )
        lines = [
            r.data async for r in provider.container_logs(config.ref, LogQuery(container="app"))
        ]
        assert lines == [b"hello from fargate\n"]

        await provider.delete_pod(config.ref, 5)
        task = await aws.acall(
            "ecs", "describe_tasks", cluster=fargate_setup.cluster, tasks=[task_arn]
        )
        assert task["tasks"][0]["lastStatus"] == "STOPPED"
        gone = await aws.acall("ecs", "describe_task_definition", taskDefinition=family)
        assert gone["taskDefinition"]["status"] == "INACTIVE"
        with pytest.raises(NotFoundError):
            await provider.get_pod_status(config.ref)
    finally:
        await provider.close()


async def test_fargate_exit_codes_and_restarts(
    fargate_setup: FargateSetup, aws: Aws, aws_proxy: AwsProxy
) -> None:
    provider = FargateProvider(FargateConfig.from_dict(fargate_setup.config()), "vk-exit")
    await provider.start()
    monitor = supervised(provider)  # re-runs stopped tasks, as under vkpy's runner
    try:
        ok, bad, again = pod("ok"), pod("bad"), pod("again", restart_policy="OnFailure")
        for config in (ok, bad, again):
            await provider.create_pod(config)
        listed = await aws.acall("ecs", "list_tasks", cluster=fargate_setup.cluster)
        described = await aws.acall(
            "ecs",
            "describe_tasks",
            cluster=fargate_setup.cluster,
            tasks=listed["taskArns"],
            include=["TAGS"],
        )
        by_name = {
            next(t["value"] for t in task["tags"] if t["key"] == "vkpy.io/pod-name"): task[
                "taskArn"
            ]
            for task in described["tasks"]
        }
        aws_proxy.rewrites.append(exit_code_rewrite(by_name["bad"], 3))
        aws_proxy.rewrites.append(exit_code_rewrite(by_name["again"], 1))
        for name in ("ok", "bad", "again"):
            await aws.acall(
                "ecs",
                "stop_task",
                cluster=fargate_setup.cluster,
                task=by_name[name],
                reason="Essential container in task exited",
            )
        assert (await wait_phase(provider, ok.ref, "Succeeded")).containers[0].exit_code == 0
        failed = await wait_phase(provider, bad.ref, "Failed")
        assert failed.containers[0].exit_code == 3
        assert failed.message == "Essential container in task exited"
        waiting = await provider.get_pod_status(again.ref)
        assert waiting.phase == "Running"
        assert waiting.containers[0].reason == "CrashLoopBackOff"
        for _ in range(60):
            state = await provider.get_pod_status(again.ref)
            if state.containers[0].state == "running":
                break
            await asyncio.sleep(0.2)
        assert state.containers[0].restart_count == 1
        assert state.containers[0].last_terminated is not None
        assert state.containers[0].last_terminated.exit_code == 1
    finally:
        monitor.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await monitor
        await provider.close()


async def test_fargate_adopts_after_restart(
    fargate_setup: FargateSetup, aws_proxy: AwsProxy
) -> None:
    config = FargateConfig.from_dict(fargate_setup.config())
    first = FargateProvider(config, "vk-adopt")
    await first.start()
    kept, orphan = pod("kept"), pod("orphan")
    try:
        await first.create_pod(kept)
        await first.create_pod(orphan)
    finally:
        await first.close()
    aws_proxy.throttle_rate = 0.3
    second = FargateProvider(config, "vk-adopt")
    await second.start()
    try:
        assert sorted(await second.list_pods()) == sorted([kept.ref, orphan.ref])
        assert (await second.get_pod_status(kept.ref)).phase == "Running"
        await second.delete_pod(orphan.ref, 0)
        assert await second.list_pods() == [kept.ref]
    finally:
        await second.close()
    other = FargateProvider(config, "vk-other")
    await other.start()
    try:
        assert await other.list_pods() == []  # never another node's tasks
    finally:
        await other.close()


def with_image(config: PodConfig, image: str) -> PodConfig:
    (app,) = config.containers
    return PodConfig(
        ref=config.ref,
        pod=config.pod,
        init_containers=(),
        containers=(
            ContainerConfig(app.name, image, app.command, app.args, app.env, spec=app.spec),
        ),
    )


async def test_lambda_image_change_updates_the_function(
    lambda_setup: LambdaSetup, aws: Aws
) -> None:
    provider = LambdaProvider(LambdaConfig.from_dict(lambda_setup.config()), "vk-upd")
    await provider.start()
    try:
        config = pod()
        await provider.create_pod(config)
        newer = with_image(config, config.containers[0].image.replace(":1", ":2"))
        await provider.update_pod(newer)
        got = await aws.acall("lambda", "get_function", FunctionName=function_name(config.ref))
        assert got["Code"]["ImageUri"].endswith(":2")
        assert got["Tags"]["vkpy.io/code"].endswith(":2")
        assert (await provider.get_pod_status(config.ref)).phase == "Running"
    finally:
        await provider.close()


async def test_fargate_image_change_runs_a_new_task(fargate_setup: FargateSetup, aws: Aws) -> None:
    provider = FargateProvider(FargateConfig.from_dict(fargate_setup.config()), "vk-upd")
    await provider.start()
    try:
        config = pod(image="busybox:1.36", restart_policy="Always")
        await provider.create_pod(config)
        await provider.update_pod(with_image(config, "busybox:1.37"))
        state = await provider.get_pod_status(config.ref)
        assert state.phase == "Running"
        assert state.containers[0].restart_count == 1
        assert state.containers[0].image == "busybox:1.37"
        listed = await aws.acall(
            "ecs", "list_tasks", cluster=fargate_setup.cluster, desiredStatus="RUNNING"
        )
        assert len(listed["taskArns"]) == 1
        revisions = await aws.acall(
            "ecs", "list_task_definitions", familyPrefix=task_family(config.ref), status="ACTIVE"
        )
        assert len(revisions["taskDefinitionArns"]) == 1
    finally:
        await provider.close()
