"""What the process backend can run, checked before anything of a pod starts.

A pod this backend cannot run faithfully is refused at once with a reason and a
message a user can act on (the pod controller writes them on the pod and in an
Event), rather than half-started: a container without `command` (there is no image
whose entrypoint could run), volume types that have no meaning on a host (PVCs, CSI,
...), hostPath outside the configured prefixes, mount and sub paths that would leave
the container's directory, and hook types that are not implemented.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from pathlib import PurePosixPath

from vkpy.core.objects import KubeObject
from vkpy.core.quantity import QuantityError, parse_quantity
from vkpy.providers.base import ContainerConfig, PodConfig, VolumeConfig
from vkpy.providers.errors import InvalidInputError, UnsupportedError

SUPPORTED_VOLUMES = ("emptyDir", "configMap", "secret", "downwardAPI", "projected", "hostPath")
PROJECTED_SOURCES = frozenset({"configMap", "secret", "downwardAPI", "serviceAccountToken"})
PROBE_HANDLERS = frozenset({"exec", "httpGet", "tcpSocket", "grpc"})
HOOK_HANDLERS = frozenset({"exec", "httpGet", "sleep"})


def clean_relative(path: str, what: str) -> str:
    """A path inside a directory: not absolute, no `..`; `` for the directory itself."""
    if "\x00" in path:
        raise InvalidInputError(f"{what}: path contains a NUL byte", reason="InvalidPath")
    parts = [p for p in PurePosixPath(path).parts if p not in ("/", ".")]
    if path.startswith("/") or ".." in parts:
        raise InvalidInputError(
            f"{what}: {path!r} must be a relative path without '..'", reason="InvalidPath"
        )
    return "/".join(parts)


def clean_absolute(path: str, what: str) -> str:
    """An absolute container path (mountPath, workingDir) as a path relative to the root."""
    if not path.startswith("/"):
        raise InvalidInputError(f"{what}: {path!r} must be absolute", reason="InvalidPath")
    return clean_relative(path.lstrip("/"), what)


def host_path_allowed(path: str, prefixes: Iterable[str]) -> bool:
    real = os.path.realpath(path)
    for prefix in prefixes:
        base = os.path.realpath(prefix)
        if real == base or real.startswith(base.rstrip("/") + "/"):
            return True
    return False


def memory_limit(container: ContainerConfig) -> int | None:
    """The container's memory limit in bytes (None: unlimited)."""
    raw = ((container.spec.get("resources") or {}).get("limits") or {}).get("memory")
    if raw is None:
        return None
    try:
        value = int(parse_quantity(raw))
    except QuantityError as error:
        raise InvalidInputError(
            f"container {container.name!r}: {error}", reason="InvalidLimit"
        ) from None
    return value if value > 0 else None


def _check_volume(volume: VolumeConfig, prefixes: tuple[str, ...]) -> None:
    if volume.kind not in SUPPORTED_VOLUMES:
        raise UnsupportedError(
            f"volume {volume.name!r} is of type {volume.kind}, which the process backend "
            f"cannot provide (it supports {', '.join(SUPPORTED_VOLUMES)}; hostPath only "
            "under the configured host_path_prefixes)",
            reason="UnsupportedVolume",
        )
    if volume.kind == "projected":
        for source in volume.source.get("sources") or []:
            kinds = set(source) - PROJECTED_SOURCES
            if kinds:
                raise UnsupportedError(
                    f"volume {volume.name!r} projects {', '.join(sorted(kinds))}, which the "
                    "process backend cannot provide",
                    reason="UnsupportedVolume",
                )
    if volume.kind == "hostPath":
        path = str(volume.source.get("path", ""))
        if not path.startswith("/") or not host_path_allowed(path, prefixes):
            allowed = ", ".join(prefixes) if prefixes else "none are configured"
            raise UnsupportedError(
                f"volume {volume.name!r}: hostPath {path!r} is outside the directories "
                f"pods may use (host_path_prefixes: {allowed})",
                reason="UnsupportedVolume",
            )


def _check_handler(handler: KubeObject | None, allowed: frozenset[str], what: str) -> None:
    if not handler:
        return
    kinds = set(handler) & {"exec", "httpGet", "tcpSocket", "grpc", "sleep"}
    unsupported = kinds - allowed
    if unsupported:
        raise UnsupportedError(
            f"{what} uses {', '.join(sorted(unsupported))}, which the process backend "
            f"does not support (it supports {', '.join(sorted(allowed))})",
            reason="UnsupportedProbe",
        )


def check_container(container: ContainerConfig, volumes: set[str], images: bool = False) -> None:
    """Raise InvalidInputError/UnsupportedError when this backend cannot run `container`
    of a pod with these volumes (`images`: `runtime: oci`, the image's own entrypoint
    runs when there is no command)."""
    what = f"container {container.name!r}"
    if not container.command and not images:
        raise InvalidInputError(
            f"{what} has no command: the process backend runs a container's command and "
            f"args as a process on the host and cannot run the entrypoint of image "
            f"{container.image!r} (images are not pulled); set command, or map the image "
            "to a host program with the `images` setting",
            reason="NoCommand",
        )
    if container.working_dir:
        clean_absolute(container.working_dir, f"{what} workingDir")
    for mount in container.spec.get("volumeMounts") or []:
        name = str(mount.get("name", ""))
        if name not in volumes:
            raise InvalidInputError(
                f"{what} mounts volume {name!r}, which the pod does not have",
                reason="InvalidMount",
            )
        clean_absolute(str(mount.get("mountPath", "")), f"{what} mountPath")
        if mount.get("subPathExpr"):
            raise UnsupportedError(
                f"{what}: subPathExpr is not supported by the process backend",
                reason="UnsupportedMount",
            )
        clean_relative(str(mount.get("subPath") or ""), f"{what} subPath")
    for kind in ("livenessProbe", "readinessProbe", "startupProbe"):
        _check_handler(container.spec.get(kind), PROBE_HANDLERS, f"{what} {kind}")
    lifecycle = container.spec.get("lifecycle") or {}
    for hook in ("postStart", "preStop"):
        _check_handler(lifecycle.get(hook), HOOK_HANDLERS, f"{what} {hook} hook")
    memory_limit(container)


def check_pod(pod: PodConfig, host_path_prefixes: tuple[str, ...], images: bool = False) -> None:
    """Raise InvalidInputError/UnsupportedError when this backend cannot run `pod`."""
    for volume in pod.volumes:
        _check_volume(volume, host_path_prefixes)
    names = {v.name for v in pod.volumes}
    for container in (*pod.init_containers, *pod.containers):
        check_container(container, names, images)
