"""Images on a host without a container runtime: what runs for a container's image.

The process backend pulls no image, so a container that names only an image (no
`command`) has nothing to run unless the image is known here. The `images` setting
maps image references to what stands in for them on the host: an entrypoint, a
default command (the image's CMD), directories put first on PATH (the image's own
programs), a working directory and environment variables. A container's `command`
and `args` keep their Kubernetes meaning: `command` replaces the entrypoint, `args`
replace the CMD. An absolute program path (`/bin/sh`, `/agnhost`) is looked up by its
name in the image's PATH directories first, as it would be found in the image, and
runs with the image's name for it as argv[0].

References are compared without tag or digest unless the pattern has a tag, with
Docker Hub's short names expanded (`busybox` is `docker.io/library/busybox`), and a
pattern may use `*` (any characters, `/` included). The configured entries come
first, then the shipped defaults (standins.py); the first match wins.
"""

from __future__ import annotations

import copy as copy_module
import dataclasses
import fnmatch
import os
import shutil
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from vkpy.core.objects import KubeObject
from vkpy.providers.base import ContainerConfig, PodConfig
from vkpy.providers.errors import InvalidInputError

DEFAULT_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
NAMED_EXEC = ("/bin/bash", "-c", 'exec -a "$0" "$@"')
"""`NAMED_EXEC + [name, file, args...]` runs `file` with argv[0] = `name` (bash's exec
replaces itself: no process stays in between)."""


@dataclass(frozen=True)
class ImageSpec:
    """What runs on the host for one image."""

    entrypoint: tuple[str, ...] = ()
    """The image's ENTRYPOINT: replaced by a container's `command`."""
    cmd: tuple[str, ...] = ()
    """The image's CMD: replaced by a container's `args`."""
    path: tuple[str, ...] = ()
    """Directories put before the default PATH (and searched for absolute program paths)."""
    working_dir: str | None = None
    """The image's WORKDIR (inside the container's root) when the container sets none."""
    env: tuple[tuple[str, str], ...] = ()
    """The image's ENV: the pod's `env` wins."""
    files: tuple[tuple[str, str], ...] = ()
    """(path in the image, host file): the image's own files, bound read-only at their
    paths in the pod's root (with the pod's own filesystem), so `/agnhost` exists
    there for a shell or `kubectl exec` that names it, as in the image."""
    user: int | None = None
    """The image's USER as a uid, when the entry says it (None: not said, the
    container runs as the pod's own id): a container without a `runAsUser` (its own
    or the pod's) runs as it when it is not 0, and `runAsNonRoot` refuses an image
    whose user is said to be 0, as the kubelet does."""


@dataclass(frozen=True)
class ImageRule:
    """`pattern` (see the module docstring) and what runs for images that match it."""

    pattern: str
    spec: ImageSpec | None
    """None: images that match have no entry (a configured `null`)."""

    def matches(self, reference: str) -> bool:
        repository, tag = split_reference(reference)
        wanted_repository, wanted_tag = split_reference(self.pattern)
        if wanted_tag is not None and wanted_tag != tag:
            return False
        if "*" in wanted_repository:
            raw = self.pattern.split("@", 1)[0]
            raw_repository = raw if wanted_tag is None else raw.rsplit(":", 1)[0]
            return fnmatch.fnmatchcase(repository, raw_repository)
        return repository == wanted_repository


def split_reference(reference: str) -> tuple[str, str | None]:
    """(repository with its registry, tag or None): `busybox:1.36` is
    (`docker.io/library/busybox`, `1.36`); a digest is dropped."""
    name = reference.split("@", 1)[0]
    tag: str | None = None
    last = name.rsplit("/", 1)[-1]
    if ":" in last:
        name, tag = name.rsplit(":", 1)
    if "*" in name:
        return name, tag
    parts = name.split("/")
    if len(parts) == 1:
        parts = ["docker.io", "library", *parts]
    elif not ("." in parts[0] or ":" in parts[0] or parts[0] == "localhost"):
        parts = ["docker.io", *parts]
    return "/".join(parts), tag


def _strings(value: object, what: str) -> tuple[str, ...]:
    if value is None:
        return ()
    if isinstance(value, str):
        return (value,)
    if not isinstance(value, Sequence) or not all(isinstance(v, str | int) for v in value):
        raise ValueError(f"{what} must be a list of strings")
    return tuple(str(v) for v in value)


SPEC_KEYS = frozenset({"entrypoint", "cmd", "path", "working_dir", "env", "user", "files"})


def parse_spec(pattern: str, raw: object) -> ImageSpec:
    """One entry of the `images` setting."""
    what = f"images[{pattern!r}]"
    if not isinstance(raw, Mapping):
        raise ValueError(f"{what} must be a mapping with {', '.join(sorted(SPEC_KEYS))}")
    unknown = set(raw) - SPEC_KEYS
    if unknown:
        raise ValueError(f"{what}: unknown keys {', '.join(sorted(map(str, unknown)))}")
    env = raw.get("env") or {}
    if not isinstance(env, Mapping):
        raise ValueError(f"{what}.env must be a mapping of names to values")
    working_dir = raw.get("working_dir")
    if working_dir is not None and not str(working_dir).startswith("/"):
        raise ValueError(f"{what}.working_dir must be an absolute path")
    files = raw.get("files") or {}
    if not isinstance(files, Mapping) or not all(
        str(k).startswith("/") and str(v).startswith("/") for k, v in files.items()
    ):
        raise ValueError(f"{what}.files must map absolute paths in the image to host files")
    user = raw.get("user")
    if user is not None and (not isinstance(user, int) or isinstance(user, bool) or user < 0):
        raise ValueError(f"{what}.user must be a uid (a number, 0 for root)")
    return ImageSpec(
        entrypoint=_strings(raw.get("entrypoint"), f"{what}.entrypoint"),
        cmd=_strings(raw.get("cmd"), f"{what}.cmd"),
        path=tuple(os.path.abspath(p) for p in _strings(raw.get("path"), f"{what}.path")),
        working_dir=str(working_dir) if working_dir is not None else None,
        env=tuple((str(k), str(v)) for k, v in env.items()),
        files=tuple((os.path.normpath(str(k)), str(v)) for k, v in files.items()),
        user=user,
    )


def parse_images(raw: object) -> tuple[tuple[str, ImageSpec | None], ...]:
    """The `images` setting: pattern -> entry, or -> null: matching images have none."""
    if raw is None:
        return ()
    if not isinstance(raw, Mapping):
        raise ValueError("images must be a mapping of image patterns to entries")
    parsed: list[tuple[str, ImageSpec | None]] = []
    for pattern, entry in raw.items():
        if not isinstance(pattern, str) or not pattern:
            raise ValueError("images: each key must be an image reference or pattern")
        parsed.append((pattern, None if entry is None else parse_spec(pattern, entry)))
    return tuple(parsed)


class ImageTable:
    """The rules in force: configured ones, then the defaults not named by one. A
    configured `null` hides every default its pattern matches."""

    def __init__(
        self,
        configured: Sequence[tuple[str, ImageSpec | None]],
        defaults: Sequence[ImageRule] = (),
    ) -> None:
        named = {pattern for pattern, _ in configured}
        self.rules: tuple[ImageRule, ...] = (
            *(ImageRule(p, s) for p, s in configured),
            *(rule for rule in defaults if rule.pattern not in named),
        )

    def lookup(self, image: str) -> ImageSpec | None:
        for rule in self.rules:
            if rule.matches(image):
                return rule.spec
        return None

    def files(self, pod: PodConfig) -> list[tuple[str, str]]:
        """The image files of the pod's containers, (path in the pod's root, host
        file); the first image to name a path wins."""
        found: dict[str, str] = {}
        for container in (*pod.init_containers, *pod.containers, *pod.ephemeral_containers):
            spec = self.lookup(container.image)
            for target, source in spec.files if spec is not None else ():
                found.setdefault(target, source)
        return sorted(found.items())

    def image_user(self, image: str) -> int | None:
        """The uid `image` runs as when nothing says otherwise (None: not known)."""
        spec = self.lookup(image)
        return spec.user if spec is not None else None

    def resolve(self, container: ContainerConfig, pod_user: bool = False) -> ContainerConfig:
        """`container` with what runs for its image filled in; InvalidInputError
        (NoCommand) when it has no command and its image is not known. `pod_user`:
        the pod sets a `runAsUser` (which the image's user does not override)."""
        spec = self.lookup(container.image)
        if spec is None:
            if not container.command:
                raise InvalidInputError(
                    f"container {container.name!r} has no command and its image "
                    f"{container.image!r} is not in the process backend's `images` setting: "
                    "images are not pulled here, so set the container's command or map the "
                    "image to a host program with `images` (see docs/process-backend.md)",
                    reason="NoCommand",
                )
            return container
        if container.command:
            argv = [*container.command, *container.args]
        else:
            argv = [*spec.entrypoint, *(container.args or spec.cmd)]
        if not argv:
            raise InvalidInputError(
                f"container {container.name!r} has no command, and the `images` entry for "
                f"{container.image!r} has neither entrypoint nor cmd",
                reason="NoCommand",
            )
        env = dict(spec.env)
        path = env.get("PATH", DEFAULT_PATH)
        if spec.path:
            env["PATH"] = ":".join((*spec.path, path))
        for name, value in container.env:
            env.pop(name, None)
            env[name] = value
        search = env.get("PATH", DEFAULT_PATH)
        program = _program(argv[0], spec.path, search)
        if program != argv[0]:
            # Run the host's file under the name the image knows it by: a program
            # may print or dispatch on argv[0] (agnhost's entrypoint-tester does).
            argv = [*NAMED_EXEC, argv[0], program, *argv[1:]]
        return dataclasses.replace(
            container,
            command=(argv[0],),
            args=tuple(argv[1:]),
            env=tuple(env.items()),
            working_dir=container.working_dir or spec.working_dir,
            spec=_with_image_user(
                _with_exec_programs(container.spec, spec.path, search), spec.user, pod_user
            ),
        )

    def command(self, container: ContainerConfig, argv: Sequence[str]) -> list[str]:
        """A command run in `container` (`kubectl exec`), its program found as in
        the image (see `_program`); the container was resolved by `resolve`."""
        spec = self.lookup(container.image)
        if spec is None or not argv:
            return list(argv)
        search = dict(container.env).get("PATH", DEFAULT_PATH)
        return [_program(argv[0], spec.path, search), *argv[1:]]

    def resolve_pod(self, pod: PodConfig) -> PodConfig:
        security = (pod.pod.get("spec") or {}).get("securityContext") or {}
        user = security.get("runAsUser") is not None
        return dataclasses.replace(
            pod,
            init_containers=tuple(self.resolve(c, user) for c in pod.init_containers),
            containers=tuple(self.resolve(c, user) for c in pod.containers),
            ephemeral_containers=tuple(self.resolve(c, user) for c in pod.ephemeral_containers),
        )


def _with_image_user(spec: KubeObject, user: int | None, pod_user: bool) -> KubeObject:
    """The container's spec running as the image's user when neither it nor its pod
    names a `runAsUser` and that user is not root (the spec is a copy already)."""
    security = spec.get("securityContext") or {}
    if not user or pod_user or security.get("runAsUser") is not None:
        return spec
    spec["securityContext"] = {**security, "runAsUser": user}
    return spec


def _with_exec_programs(
    spec: KubeObject, image_path: Sequence[str], search_path: str
) -> KubeObject:
    """The container's spec with the programs of its exec probes and hooks found as
    in the image (a copy; the original is never changed)."""
    handlers: list[tuple[tuple[str, ...], KubeObject]] = []
    for kind in ("livenessProbe", "readinessProbe", "startupProbe"):
        handlers.append(((kind,), spec.get(kind) or {}))
    lifecycle = spec.get("lifecycle") or {}
    for hook in ("postStart", "preStop"):
        handlers.append((("lifecycle", hook), lifecycle.get(hook) or {}))
    copy = copy_module.deepcopy(spec)
    for where, handler in handlers:
        command = (handler.get("exec") or {}).get("command") or []
        if not command:
            continue
        target = copy
        for key in where:
            target = target[key]
        target["exec"]["command"] = [
            _program(str(command[0]), image_path, search_path),
            *command[1:],
        ]
    return copy


def _program(program: str, image_path: Sequence[str], search_path: str) -> str:
    """An absolute program path as the image would find it: by its name in the
    image's PATH directories when one has it; else the host's when the host has that
    path; else by its name on the container's PATH (`/agnhost` is agnhost on PATH)."""
    if not program.startswith("/"):
        return program
    name = os.path.basename(program)
    for directory in image_path:
        candidate = os.path.join(directory, name)
        if os.path.isfile(candidate) and os.access(candidate, os.X_OK):
            return candidate
    if os.path.exists(program):
        return program
    return shutil.which(name, path=search_path) or program
