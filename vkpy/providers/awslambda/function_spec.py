"""What Lambda function a pod is: the pure mapping from `PodConfig` to API parameters.

A pod is one function: its one container's image becomes an Image function, or the
`vkpy.io/lambda-*` annotations describe a zip function (runtime, handler, code from
S3 or from a ConfigMap volume); the environment, the memory limit (clamped to
Lambda's range, saying so), a timeout and labels map onto the function. Whatever a
function cannot be (a second container, init containers, volumes other than /tmp and
the code ConfigMap) is refused here with a message naming the feature, before any
call to AWS. No I/O happens in this module, so every rule is unit-tested directly.
"""

from __future__ import annotations

import hashlib
import io
import math
import re
import zipfile
from collections.abc import Mapping
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Literal
from urllib.parse import parse_qs, urlparse

from vkpy.core.quantity import QuantityError, parse_quantity
from vkpy.providers import owner_tags
from vkpy.providers.aws import naming, tags
from vkpy.providers.awslambda.config import LambdaConfig
from vkpy.providers.base import ContainerConfig, PodConfig, VolumeConfig
from vkpy.providers.errors import InvalidInputError, UnsupportedError

ANNOTATION = "vkpy.io/lambda-"
RUNTIME = ANNOTATION + "runtime"
HANDLER = ANNOTATION + "handler"
CODE_S3 = ANNOTATION + "code-s3"
CODE_CONFIGMAP = ANNOTATION + "code-configmap"
TIMEOUT = ANNOTATION + "timeout"
ARCHITECTURE = ANNOTATION + "architecture"

CONTAINER_TAG = owner_tags.PREFIX + "container"
CODE_TAG = owner_tags.PREFIX + "code"
NOTE_TAG = owner_tags.PREFIX + "note"

MEMORY_MIN_MB = 128
MEMORY_MAX_MB = 10240
TIMEOUT_MAX = 900
STORAGE_MIN_MB = 512
STORAGE_MAX_MB = 10240
ENV_MAX_BYTES = 4096
ZIP_MAX_BYTES = 50 * 2**20
LAMBDA_TMP = "/tmp"  # noqa: S108 - the path Lambda gives functions, not one vkpy uses
"""The one writable directory of a function; an emptyDir mounted there sizes it."""
SERVICE_ACCOUNT_VOLUME = "kube-api-access-"
"""Name prefix of the token volume Kubernetes adds to pods; a function has no use for it."""

RESERVED_ENV = frozenset(
    {
        "_HANDLER",
        "_X_AMZN_TRACE_ID",
        "AWS_DEFAULT_REGION",
        "AWS_REGION",
        "AWS_EXECUTION_ENV",
        "AWS_LAMBDA_FUNCTION_NAME",
        "AWS_LAMBDA_FUNCTION_MEMORY_SIZE",
        "AWS_LAMBDA_FUNCTION_VERSION",
        "AWS_LAMBDA_INITIALIZATION_TYPE",
        "AWS_LAMBDA_LOG_GROUP_NAME",
        "AWS_LAMBDA_LOG_STREAM_NAME",
        "AWS_ACCESS_KEY",
        "AWS_ACCESS_KEY_ID",
        "AWS_SECRET_ACCESS_KEY",
        "AWS_SESSION_TOKEN",
        "AWS_LAMBDA_RUNTIME_API",
        "LAMBDA_TASK_ROOT",
        "LAMBDA_RUNTIME_DIR",
    }
)
"""Variables Lambda sets itself and refuses in a function's configuration."""
_ENV_NAME = re.compile(r"^[A-Za-z][A-Za-z0-9_]+$")


@dataclass(frozen=True)
class FunctionSpec:
    """A function as CreateFunction/UpdateFunction* want it."""

    name: str
    package_type: Literal["Image", "Zip"]
    code: Mapping[str, object] = field(repr=False)
    """`Code` of CreateFunction: ImageUri, S3Bucket/S3Key[/S3ObjectVersion] or ZipFile."""
    code_id: str
    """What the code is (image, s3 URL, zip digest), kept in a tag to notice changes."""
    configuration: Mapping[str, object] = field(repr=False)
    """The parameters UpdateFunctionConfiguration takes (Role, MemorySize, ...)."""
    tags: Mapping[str, str]
    architectures: tuple[str, ...] = ("x86_64",)
    notes: tuple[str, ...] = ()
    """What was changed to fit Lambda (memory clamped, ...), for the pod's status."""

    def create_params(self) -> dict[str, object]:
        return {
            "FunctionName": self.name,
            "PackageType": self.package_type,
            "Code": dict(self.code),
            "Tags": dict(self.tags),
            "Architectures": list(self.architectures),
            "Publish": False,
            **self.configuration,
        }


def _annotations(pod: PodConfig) -> Mapping[str, str]:
    return (pod.pod.get("metadata") or {}).get("annotations") or {}


def _labels(pod: PodConfig) -> Mapping[str, str]:
    return (pod.pod.get("metadata") or {}).get("labels") or {}


def _single_container(pod: PodConfig) -> ContainerConfig:
    if pod.init_containers:
        raise UnsupportedError(
            "a Lambda function has no init containers; remove them or use the fargate backend",
            reason="UnsupportedInitContainers",
        )
    if len(pod.containers) != 1:
        raise UnsupportedError(
            f"a Lambda function is one container; this pod has {len(pod.containers)}",
            reason="UnsupportedMultipleContainers",
        )
    return pod.containers[0]


def memory_mb(container: ContainerConfig, default_mb: int) -> tuple[int, str | None]:
    """Function memory from the container's memory limit (else request), and a note
    when it had to be clamped into Lambda's range."""
    resources = container.spec.get("resources") or {}
    raw = (resources.get("limits") or {}).get("memory") or (resources.get("requests") or {}).get(
        "memory"
    )
    if raw is None:
        return default_mb, None
    try:
        wanted = math.ceil(parse_quantity(raw) / Decimal(2**20))
    except QuantityError:
        raise InvalidInputError(
            f"container {container.name}: memory {raw!r} is not a quantity",
            reason="InvalidMemory",
        ) from None
    clamped = min(MEMORY_MAX_MB, max(MEMORY_MIN_MB, wanted))
    if clamped == wanted:
        return wanted, None
    bound = "minimum" if clamped > wanted else "maximum"
    return clamped, f"memory {raw} set to {clamped} MB, the Lambda {bound}"


def _timeout(annotations: Mapping[str, str], default: int) -> int:
    raw = annotations.get(TIMEOUT)
    if raw is None:
        return default
    try:
        value = int(raw)
    except ValueError:
        value = 0
    if not 1 <= value <= TIMEOUT_MAX:
        raise InvalidInputError(
            f"annotation {TIMEOUT}={raw!r} must be whole seconds from 1 to {TIMEOUT_MAX}",
            reason="InvalidLambdaAnnotation",
        )
    return value


def _environment(container: ContainerConfig) -> dict[str, str]:
    env = dict(container.env)
    for name in env:
        if name in RESERVED_ENV:
            raise InvalidInputError(
                f"container {container.name}: environment variable {name} is reserved by Lambda",
                reason="InvalidEnvironment",
            )
        if not _ENV_NAME.match(name):
            raise InvalidInputError(
                f"container {container.name}: environment variable name {name!r} is not "
                "allowed by Lambda (letters, digits, _; starting with a letter)",
                reason="InvalidEnvironment",
            )
    size = sum(len(k.encode()) + len(v.encode()) for k, v in env.items())
    if size > ENV_MAX_BYTES:
        raise InvalidInputError(
            f"container {container.name}: the environment is {size} bytes; "
            f"Lambda allows {ENV_MAX_BYTES}",
            reason="InvalidEnvironment",
        )
    return env


def _volumes(
    pod: PodConfig, container: ContainerConfig, code_config_map: str | None
) -> tuple[int | None, VolumeConfig | None]:
    """The /tmp size (from an emptyDir mounted there) and the code ConfigMap volume."""
    mounts = {m.get("name"): m for m in container.spec.get("volumeMounts") or []}
    storage: int | None = None
    code: VolumeConfig | None = None
    for volume in pod.volumes:
        if volume.name.startswith(SERVICE_ACCOUNT_VOLUME):
            continue
        if (
            volume.kind == "configMap"
            and code_config_map
            and (volume.source.get("name") == code_config_map)
        ):
            code = volume
            continue
        if volume.kind == "emptyDir":
            mount = mounts.get(volume.name) or {}
            if mount and mount.get("mountPath") not in (LAMBDA_TMP, LAMBDA_TMP + "/"):
                raise UnsupportedError(
                    f"volume {volume.name}: a Lambda function can only mount an emptyDir at "
                    f"{LAMBDA_TMP}, not {mount.get('mountPath')}",
                    reason="UnsupportedVolume",
                )
            storage = _storage_mb(volume)
            continue
        raise UnsupportedError(
            f"volume {volume.name}: {volume.kind} volumes cannot be mapped to a Lambda "
            "function (only an emptyDir at /tmp, and the code ConfigMap)",
            reason="UnsupportedVolume",
        )
    if code_config_map and code is None:
        raise InvalidInputError(
            f"annotation {CODE_CONFIGMAP}={code_config_map!r}: the pod has no configMap "
            "volume of that ConfigMap",
            reason="InvalidLambdaAnnotation",
        )
    return storage, code


def _storage_mb(volume: VolumeConfig) -> int:
    raw = volume.source.get("sizeLimit")
    if raw is None:
        return STORAGE_MIN_MB
    try:
        wanted = math.ceil(parse_quantity(raw) / Decimal(2**20))
    except QuantityError:
        raise InvalidInputError(
            f"volume {volume.name}: sizeLimit {raw!r} is not a quantity", reason="InvalidVolume"
        ) from None
    return min(STORAGE_MAX_MB, max(STORAGE_MIN_MB, wanted))


def _s3_code(url: str) -> tuple[dict[str, object], str]:
    parsed = urlparse(url)
    key = parsed.path.lstrip("/")
    if parsed.scheme != "s3" or not parsed.netloc or not key:
        raise InvalidInputError(
            f"annotation {CODE_S3}={url!r} must be s3://bucket/key[?versionId=...]",
            reason="InvalidLambdaAnnotation",
        )
    code: dict[str, object] = {"S3Bucket": parsed.netloc, "S3Key": key}
    version = parse_qs(parsed.query).get("versionId")
    if version:
        code["S3ObjectVersion"] = version[0]
    return code, url


def zip_from_files(volume: VolumeConfig) -> bytes:
    """The function's zip: the ConfigMap's one `.zip` file, or all its files zipped."""
    if not volume.files:
        raise InvalidInputError(
            f"volume {volume.name}: the kubelet provided no files of ConfigMap "
            f"{volume.source.get('name')}",
            reason="InvalidLambdaCode",
        )
    zips = [f for f in volume.files if f.path.endswith(".zip")]
    if len(zips) == 1 and len(volume.files) == 1:
        data = zips[0].data
    else:
        buffer = io.BytesIO()
        with zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED) as archive:
            for item in sorted(volume.files, key=lambda f: f.path):
                info = zipfile.ZipInfo(item.path, date_time=(1980, 1, 1, 0, 0, 0))
                info.external_attr = (0o100000 | (item.mode or 0o644)) << 16
                info.compress_type = zipfile.ZIP_DEFLATED
                archive.writestr(info, item.data)
        data = buffer.getvalue()
    if len(data) > ZIP_MAX_BYTES:
        raise InvalidInputError(
            f"volume {volume.name}: the code is {len(data)} bytes; Lambda takes at most "
            f"{ZIP_MAX_BYTES} directly (use {CODE_S3})",
            reason="InvalidLambdaCode",
        )
    return data


def build(pod: PodConfig, config: LambdaConfig, node: str) -> FunctionSpec:
    """The function for `pod`; InvalidInputError/UnsupportedError when there is none."""
    container = _single_container(pod)
    annotations = _annotations(pod)
    memory, memory_note = memory_mb(container, config.default_memory_mb)
    runtime = annotations.get(RUNTIME)
    code_s3 = annotations.get(CODE_S3)
    code_config_map = annotations.get(CODE_CONFIGMAP)
    storage, code_volume = _volumes(pod, container, code_config_map)
    architecture = annotations.get(ARCHITECTURE, "x86_64")
    if architecture not in ("x86_64", "arm64"):
        raise InvalidInputError(
            f"annotation {ARCHITECTURE}={architecture!r} must be x86_64 or arm64",
            reason="InvalidLambdaAnnotation",
        )
    configuration: dict[str, object] = {
        "Role": config.role_arn,
        "MemorySize": memory,
        "Timeout": _timeout(annotations, config.default_timeout),
        "Environment": {"Variables": _environment(container)},
        "Description": f"vkpy pod {pod.ref.namespace}/{pod.ref.name} on node {node}"[:256],
    }
    if storage is not None:
        configuration["EphemeralStorage"] = {"Size": storage}
    package: Literal["Image", "Zip"]
    if runtime or code_s3 or code_config_map:
        package = "Zip"
        handler = annotations.get(HANDLER)
        if not (runtime and handler):
            raise InvalidInputError(
                f"a zip function needs both {RUNTIME} and {HANDLER} annotations",
                reason="InvalidLambdaAnnotation",
            )
        if bool(code_s3) == bool(code_config_map):
            raise InvalidInputError(
                f"a zip function needs exactly one of {CODE_S3} and {CODE_CONFIGMAP}",
                reason="InvalidLambdaAnnotation",
            )
        if container.command or container.args:
            raise UnsupportedError(
                f"container {container.name}: command and args cannot be given to a zip "
                f"function; its entry point is the {HANDLER} annotation",
                reason="UnsupportedCommand",
            )
        configuration["Runtime"] = runtime
        configuration["Handler"] = handler
        if code_s3:
            code, code_id = _s3_code(code_s3)
        else:
            assert code_volume is not None
            data = zip_from_files(code_volume)
            code = {"ZipFile": data}
            code_id = "sha256:" + hashlib.sha256(data).hexdigest()
    else:
        package = "Image"
        code = {"ImageUri": container.image}
        code_id = container.image
        image_config: dict[str, object] = {}
        if container.command:
            image_config["EntryPoint"] = list(container.command)
        if container.args:
            image_config["Command"] = list(container.args)
        if container.working_dir:
            image_config["WorkingDirectory"] = container.working_dir
        configuration["ImageConfig"] = image_config
    notes = tuple(n for n in (memory_note,) if n)
    extra = {CONTAINER_TAG: container.name, CODE_TAG: tags.note_value(code_id)}
    if notes:
        extra[NOTE_TAG] = tags.note_value("; ".join(notes))
    return FunctionSpec(
        name=naming.function_name(pod.ref),
        package_type=package,
        code=code,
        code_id=code_id,
        configuration=configuration,
        tags=tags.pod_tags(node, pod.ref, _labels(pod), extra),
        architectures=(architecture,),
        notes=notes,
    )


def configuration_changes(spec: FunctionSpec, current: Mapping[str, object]) -> dict[str, object]:
    """The UpdateFunctionConfiguration parameters whose values differ from `current`
    (a GetFunction `Configuration`)."""
    changed: dict[str, object] = {}
    for key, wanted in spec.configuration.items():
        have = current.get(key)
        if key == "Environment":
            have = {"Variables": dict((current.get("Environment") or {}).get("Variables") or {})}  # type: ignore[attr-defined]
        elif key == "ImageConfig":
            have = dict((current.get("ImageConfigResponse") or {}).get("ImageConfig") or {})  # type: ignore[attr-defined]
        if have != wanted:
            changed[key] = wanted
    return changed
