"""The pod → Lambda function mapping, function state → pod state, and `invoke`."""

from __future__ import annotations

import io
import json
import zipfile
from typing import Any

import pytest

from vkpy.providers.aws.retry import RetryPolicy
from vkpy.providers.aws.settings import AwsSettings
from vkpy.providers.awslambda import function_spec, invoke
from vkpy.providers.awslambda.config import LambdaConfig
from vkpy.providers.awslambda.status import pod_state
from vkpy.providers.base import (
    ContainerConfig,
    PodConfig,
    PodRef,
    StreamIO,
    VolumeConfig,
    VolumeFile,
)
from vkpy.providers.errors import InvalidInputError, UnsupportedError

CONFIG = LambdaConfig(aws=AwsSettings(retry=RetryPolicy()), role_arn="arn:aws:iam::1:role/r")


def pod(
    *,
    annotations: dict[str, str] | None = None,
    resources: dict[str, Any] | None = None,
    env: tuple[tuple[str, str], ...] = (),
    command: tuple[str, ...] = (),
    args: tuple[str, ...] = (),
    volumes: tuple[VolumeConfig, ...] = (),
    mounts: list[dict[str, Any]] | None = None,
    containers: int = 1,
    inits: int = 0,
) -> PodConfig:
    spec = {"resources": resources or {}, "volumeMounts": mounts or []}
    one = ContainerConfig("app", "repo/img:1", command, args, env, spec=spec)
    return PodConfig(
        ref=PodRef("ns", "p", "uid-1"),
        pod={"metadata": {"annotations": annotations or {}, "labels": {"app": "p"}}},
        init_containers=(one,) * inits,
        containers=(one,) * containers,
        volumes=volumes,
    )


@pytest.mark.parametrize(
    ("memory", "size", "noted"),
    [("64Mi", 128, True), ("1Gi", 1024, False), ("1G", 954, False), ("20Gi", 10240, True)],
)
def test_memory_from_the_limit_clamped_with_a_note(memory: str, size: int, noted: bool) -> None:
    spec = function_spec.build(pod(resources={"limits": {"memory": memory}}), CONFIG, "n")
    assert spec.configuration["MemorySize"] == size
    assert bool(spec.notes) == noted
    assert (function_spec.NOTE_TAG in spec.tags) == noted


def test_memory_request_then_default() -> None:
    spec = function_spec.build(pod(resources={"requests": {"memory": "256Mi"}}), CONFIG, "n")
    assert spec.configuration["MemorySize"] == 256
    assert function_spec.build(pod(), CONFIG, "n").configuration["MemorySize"] == 512


def test_image_function_with_command_env_timeout_and_tags() -> None:
    spec = function_spec.build(
        pod(
            annotations={"vkpy.io/lambda-timeout": "120"},
            env=(("AB", "1"),),
            command=("/entry",),
            args=("x",),
        ),
        CONFIG,
        "node-1",
    )
    params = spec.create_params()
    assert params["PackageType"] == "Image"
    assert params["Code"] == {"ImageUri": "repo/img:1"}
    assert params["ImageConfig"] == {"EntryPoint": ["/entry"], "Command": ["x"]}
    assert params["Timeout"] == 120
    assert params["Environment"] == {"Variables": {"AB": "1"}}
    assert params["Role"] == CONFIG.role_arn
    assert spec.tags["vkpy.io/node"] == "node-1" and spec.tags["app"] == "p"
    assert len(spec.name) <= 64


@pytest.mark.parametrize(
    ("config", "error", "text"),
    [
        (pod(containers=2), UnsupportedError, "one container"),
        (pod(inits=1), UnsupportedError, "init containers"),
        (pod(annotations={"vkpy.io/lambda-timeout": "901"}), InvalidInputError, "timeout"),
        (pod(env=(("AWS_REGION", "x"),)), InvalidInputError, "reserved"),
        (pod(env=(("1BAD", "x"),)), InvalidInputError, "not allowed"),
        (pod(env=(("BIG", "x" * 5000),)), InvalidInputError, "4096"),
        (pod(annotations={"vkpy.io/lambda-runtime": "python3.12"}), InvalidInputError, "handler"),
        (
            pod(volumes=(VolumeConfig("v", "persistentVolumeClaim"),)),
            UnsupportedError,
            "persistentVolumeClaim",
        ),
        (
            pod(
                volumes=(VolumeConfig("v", "emptyDir"),), mounts=[{"name": "v", "mountPath": "/d"}]
            ),
            UnsupportedError,
            "/tmp",
        ),
    ],
)
def test_unrepresentable_pods_are_refused_with_a_reason(
    config: PodConfig, error: type[Exception], text: str
) -> None:
    with pytest.raises(error, match=text):
        function_spec.build(config, CONFIG, "n")


def test_tmp_empty_dir_sizes_storage_and_token_volume_is_ignored() -> None:
    volumes = (
        VolumeConfig("scratch", "emptyDir", source={"sizeLimit": "2Gi"}),
        VolumeConfig("kube-api-access-x", "projected"),
    )
    spec = function_spec.build(
        pod(volumes=volumes, mounts=[{"name": "scratch", "mountPath": "/tmp"}]), CONFIG, "n"
    )
    assert spec.configuration["EphemeralStorage"] == {"Size": 2048}


def test_zip_from_s3_and_from_a_config_map() -> None:
    zip_annotations = {
        "vkpy.io/lambda-runtime": "python3.12",
        "vkpy.io/lambda-handler": "app.handler",
    }
    s3 = function_spec.build(
        pod(annotations={**zip_annotations, "vkpy.io/lambda-code-s3": "s3://b/k.zip?versionId=7"}),
        CONFIG,
        "n",
    )
    assert s3.create_params()["Code"] == {"S3Bucket": "b", "S3Key": "k.zip", "S3ObjectVersion": "7"}
    assert s3.configuration["Handler"] == "app.handler"
    volume = VolumeConfig(
        "code", "configMap", source={"name": "cm"}, files=(VolumeFile("app.py", b"x = 1\n"),)
    )
    cm = function_spec.build(
        pod(
            annotations={**zip_annotations, "vkpy.io/lambda-code-configmap": "cm"},
            volumes=(volume,),
        ),
        CONFIG,
        "n",
    )
    data = cm.create_params()["Code"]["ZipFile"]  # type: ignore[index]
    with zipfile.ZipFile(io.BytesIO(data)) as archive:
        assert archive.read("app.py") == b"x = 1\n"
    again = function_spec.build(
        pod(
            annotations={**zip_annotations, "vkpy.io/lambda-code-configmap": "cm"},
            volumes=(volume,),
        ),
        CONFIG,
        "n",
    )
    assert again.code_id == cm.code_id  # deterministic zip: no spurious code updates


def test_only_changed_configuration_is_updated() -> None:
    spec = function_spec.build(pod(env=(("AB", "1"),)), CONFIG, "n")
    current = {
        "Role": CONFIG.role_arn,
        "MemorySize": 512,
        "Timeout": 30,
        "Environment": {"Variables": {"AB": "1"}},
        "Description": spec.configuration["Description"],
        "ImageConfigResponse": {"ImageConfig": {}},
    }
    assert function_spec.configuration_changes(spec, current) == {}
    assert function_spec.configuration_changes(spec, {**current, "MemorySize": 128}) == {
        "MemorySize": 512
    }


def test_function_states_map_to_pod_phases() -> None:
    pending = pod_state({"State": "Pending", "StateReason": "creating"}, "app", "img")
    assert pending.phase == "Pending"
    assert pending.containers[0].reason == "ContainerCreating"
    active = pod_state(
        {"State": "Active", "LastModified": "2024-01-02T03:04:05.678+0000"}, "app", "img", "note"
    )
    assert active.phase == "Running" and active.containers[0].ready
    assert active.message == "note"
    assert active.started_at is not None and active.started_at.year == 2024
    failed = pod_state(
        {"State": "Failed", "StateReasonCode": "InvalidImage", "StateReason": "bad image"},
        "app",
        "img",
    )
    assert (failed.phase, failed.reason, failed.message) == ("Failed", "InvalidImage", "bad image")


class Sink:
    def __init__(self) -> None:
        self.data = b""

    async def write(self, data: bytes) -> None:
        self.data += data

    async def close(self) -> None:
        return None


class Source:
    def __init__(self, *chunks: bytes) -> None:
        self.chunks = list(chunks)

    async def read(self) -> bytes:
        return self.chunks.pop(0) if self.chunks else b""


async def test_invoke_command_payloads_and_errors() -> None:
    seen: list[bytes] = []

    async def call(payload: bytes) -> invoke.InvokeResult:
        seen.append(payload)
        return invoke.InvokeResult(payload=b'{"ok": true}')

    out, err = Sink(), Sink()
    io_ = StreamIO(None, out, err, tty=False)
    assert await invoke.run(["invoke", '{"x":1}'], io_, call) == 0
    assert json.loads(out.data) == {"ok": True} and seen == [b'{"x":1}']
    assert (
        await invoke.run(["invoke"], StreamIO(Source(b'{"y"', b":2}"), out, err, False), call) == 0
    )
    assert seen[-1] == b'{"y":2}'
    assert await invoke.run(["invoke"], io_, call) == 0 and seen[-1] == b"{}"
    assert await invoke.run(["invoke", "{nope"], io_, call) == invoke.USAGE_ERROR
    assert b"not valid JSON" in err.data
    assert await invoke.run(["sh", "-c", "ls"], io_, call) == invoke.NOT_EXECUTABLE

    async def failing(payload: bytes) -> invoke.InvokeResult:
        return invoke.InvokeResult(payload=b'{"errorMessage": "boom"}', function_error="Unhandled")

    err = Sink()
    assert await invoke.run(["invoke", "{}"], StreamIO(None, Sink(), err, False), failing) == 1
    assert b"Unhandled" in err.data
