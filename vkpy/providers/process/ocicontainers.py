"""One container run of `runtime: oci`: its image pulled, its root unpacked, its OCI
spec written, and what the supervisor runs: `runc run` in the foreground.

The kubelet's image steps come first (vkpy/oci/images): the pull policy, pull
secrets from `PodConfig.registry_credentials`, the Events `Pulling`/`Pulled`/`Failed`
/`BackOff`, and while the image cannot be had the container waits with
`ErrImagePull`, then `ImagePullBackOff` (10 s doubling to 5 min), or
`ErrImageNeverPull`; a spec the image cannot satisfy (runAsNonRoot on a root image,
no command) waits with `CreateContainerConfigError`. The root filesystem is unpacked
once per container with the pod's id map (kept across restarts of the container).

The spec (vkpy.oci.runtime.spec) joins the pod sandbox's namespaces (its own
network's unless the pod is on the host network), maps the pod's ids, and carries the
image's config under the pod's command/args/env/workingDir/user (Kubernetes' rules,
vkpy.oci.images.container), volumes as bind mounts (subPath opened through
beneath.py, never following a link the pod made), readOnlyRootFilesystem,
capabilities, RuntimeDefault seccomp and the resources as cgroup limits. Each
container also gets the pod's /etc/hosts, /etc/hostname and /etc/resolv.conf
(ocietc.py); an ephemeral container with a target joins its PID namespace
(ociephemeral.py); a pod the node lets have the host's namespaces or users keeps
them (ocihost.py).

The supervisor (supervisor.py) stays what it is: it logs the output in the CRI
format, records the exit and outlives vkpy. It runs `runc run --detach` (create and
start in one runc process) as a child subreaper, so the container's init becomes its
child once runc exits: its exit status is the container's own and no runc process stays per
container (a `tty: true` container still runs under `runc run` in the foreground,
which relays its terminal). SIGTERM goes to the container's init, SIGKILL through
`runc kill` (LaunchSpec.kill_argv). The supervisor runs runc as root: the
container's confinement is runc's, not enter.py's.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import time
from collections.abc import Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from vkpy.core.quantity import QuantityError, parse_quantity
from vkpy.oci.images import messages
from vkpy.oci.images.backoff import PullBackOff
from vkpy.oci.images.container import (
    ContainerConfigError,
    command_line,
    environment,
    user,
    working_dir,
)
from vkpy.oci.images.credentials import keyring_from_logins
from vkpy.oci.images.errors import ImageError, ImageNeverPullError
from vkpy.oci.images.pull import PullResult
from vkpy.oci.images.reference import default_pull_policy, parse
from vkpy.oci.runtime import spec
from vkpy.oci.runtime.runc import RuncError, write_bundle
from vkpy.oci.runtime.sandbox import PodSandbox, SandboxNotRunning
from vkpy.providers.base import ContainerConfig, PodConfig, PodEvent
from vkpy.providers.process import (
    beneath,
    host_paths,
    ociephemeral,
    ocietc,
    ocihost,
    sandbox,
)
from vkpy.providers.process.idranges import PodRange
from vkpy.providers.process.images import DEFAULT_PATH
from vkpy.providers.process.layout import InstanceDir, PodDir
from vkpy.providers.process.ocipods import (
    CGROUP_ROOT,
    OciNode,
    cgroups_path,
    container_id,
    sandbox_id,
)
from vkpy.providers.process.records import EXIT_CANNOT_RUN, ExitRecord, LaunchSpec, ProcessContext
from vkpy.providers.process.runtime import container_env
from vkpy.providers.process.termination import MESSAGE_FILE

if TYPE_CHECKING:
    from vkpy.providers.process.container import ContainerRunner

log = logging.getLogger(__name__)

NEVER_PULL_RETRY = 10.0
"""Seconds between looks for an image that may not be pulled (it may be imported)."""
CONFIG_ERROR_RETRY = 10.0
ERR_IMAGE_PULL_SHOWN = 5.0
"""Seconds a failed pull shows `ErrImagePull` before `ImagePullBackOff` (the kubelet
reports the failure itself until its next sync of the pod)."""


@dataclass(frozen=True)
class Prepared:
    """A container ready to run: what its supervisor runs, and its image's digest."""

    launch: LaunchSpec
    image_id: str


def _event(runner: ContainerRunner, kind: str, reason: str, message: str) -> None:
    event = PodEvent(kind, reason, message, runner.config.name)  # type: ignore[arg-type]
    runner.runtime.report_event(runner.pod.ref, event)


def _wait(runner: ContainerRunner, reason: str, message: str | None) -> None:
    runner.waiting = (reason, message)
    runner._changed()


async def pull(node: OciNode, runner: ContainerRunner) -> PullResult:
    """The container's image, as the kubelet gets it: returns once it is in the store."""
    image = runner.config.image
    policy = str(runner.config.spec.get("imagePullPolicy") or default_pull_policy(image))
    key = PullBackOff.key(runner.pod.ref.uid, image)
    keyring = keyring_from_logins(
        (c.server, c.username, c.password) for c in runner.pod.registry_credentials
    )
    while True:
        remaining = node.backoff.remaining(key)
        if remaining > 0:
            _wait(runner, messages.IMAGE_PULL_BACK_OFF, messages.back_off(image))
            _event(runner, "Normal", messages.BACK_OFF, messages.back_off(image))
            await asyncio.sleep(remaining)
        will_pull = policy == "Always" or (
            policy != "Never" and node.store.lookup(normalised(image)) is None
        )
        if will_pull:
            _event(runner, "Normal", "Pulling", messages.pulling(image))
        try:
            result = await node.puller.ensure(image, policy, keyring)
        except ImageNeverPullError as error:
            _wait(runner, error.reason, str(error))
            _event(runner, "Warning", "ErrImageNeverPull", str(error))
            await asyncio.sleep(NEVER_PULL_RETRY)
            continue
        except ImageError as error:
            node.backoff.failed(key)
            _wait(runner, error.reason, str(error))
            _event(runner, "Warning", messages.FAILED, messages.failed(image, error))
            _event(runner, "Warning", messages.FAILED, f"Error: {error.reason}")
            await asyncio.sleep(min(ERR_IMAGE_PULL_SHOWN, node.backoff.remaining(key)))
            continue
        node.backoff.succeeded(key)
        _event(runner, "Normal", messages.PULLED, messages.pulled(image, result))
        return result


def normalised(image: str) -> str:
    """The image's reference as the store keys it (the text itself if it is invalid)."""
    try:
        return str(parse(image))
    except ImageError:
        return image


async def prepare(
    node: OciNode, runner: ContainerRunner, pod_dir: PodDir, instance: InstanceDir, ids: PodRange
) -> Prepared | ExitRecord:
    """Everything up to the run: the image, the root, the bundle. Waits (with the
    container's waiting reason) while the image cannot be had or the spec cannot be
    made; an ExitRecord when runc's side cannot be prepared (the sandbox is gone)."""
    result = await pull(node, runner)
    pod, config = runner.pod, runner.config
    ids = ocihost.effective_range(pod.pod.get("spec") or {}, ids)
    image_ref = str(result.ref)
    runner.dir.path.mkdir(parents=True, exist_ok=True)
    for place in (pod_dir.path, pod_dir.containers, runner.dir.path):
        os.chmod(place, 0o711)  # noqa: S103 (runc's init, the pod's root, walks here)
    shared = bool((pod.pod.get("spec") or {}).get("shareProcessNamespace"))
    try:
        sandbox_ = PodSandbox(node.runc, sandbox_id(pod.ref.uid))
        # The host's namespaces the node lets the pod have (no user namespace for
        # hostUsers: its root is then not id-mapped either).
        joined = ocihost.container_namespaces(
            pod.pod.get("spec") or {}, await sandbox_.container_namespaces(shared)
        )
        if node.config.network != "pod":
            joined.pop("network", None)  # the host's network, as in `host` network mode
        rootfs = await node.container_root(
            runner.dir.path, image_ref, result.image.manifest_digest, ids, joined.get("user")
        )
    except (SandboxNotRunning, RuncError) as error:
        return _sandbox_gone(error)
    while True:
        try:
            image_config = node.store.config(image_ref)
            pod_env = container_env(runner.runtime, pod, config, default_path=False)
            container = await _container(
                node, pod, pod_dir, config, image_config, rootfs, ids, joined, pod_env
            )
            break
        except (ContainerConfigError, spec.SpecError, ValueError) as error:
            _wait(runner, "CreateContainerConfigError", str(error))
            _event(runner, "Warning", "Failed", f"Error: {error}")
            await asyncio.sleep(CONFIG_ERROR_RETRY)
        except (SandboxNotRunning, RuncError) as error:
            return _sandbox_gone(error)
        except ociephemeral.TargetNotRunning as error:
            return ExitRecord(
                exit_code=EXIT_CANNOT_RUN,
                finished_ns=time.time_ns(),
                reason="ContainerCannotRun",
                message=str(error),
            )
    first = await asyncio.to_thread(
        ocietc.write_files,
        pod,
        pod_dir,
        runner.runtime.pod_ip(pod.ref),
        node.config.kubernetes_service_host,
        ids.base,
    )
    missing_dns = ocietc.missing_cluster_dns(pod) if first else None
    if missing_dns is not None:
        runner.runtime.report_event(pod.ref, PodEvent("Warning", "MissingClusterDNS", missing_dns))
    etc = ocietc.mounts(pod, pod_dir, config, container.security.read_only_root)
    container = replace(container, volumes=(*container.volumes, *etc))
    # Written by the container's user: its host id (root's file otherwise), given
    # through a descriptor, never by following what is at that name.
    process = container.process
    beneath.chown_file(
        runner.dir.path, MESSAGE_FILE, ids.host_id(process.uid), ids.host_id(process.gid)
    )
    name = container_id(pod.ref.uid, config.name, instance.number)
    bundle = instance.path / "bundle"
    container = _with_cgroup(container, pod.ref.uid, f"{config.name}-{instance.number}")
    write_bundle(bundle, spec.generate(container, node.platform))
    await _delete_earlier_runs(node, pod.ref.uid, config.name)
    runc = [node.runc.binary, "--root", str(node.runc.root)]
    settings = runner.runtime.config
    tty = bool(config.spec.get("tty"))
    pid_file = instance.path / "container.pid"
    runtime_log = instance.path / "runc.log"
    logged = (*runc, "--log", str(runtime_log), "--log-format", "json")
    if tty:  # runc relays the terminal: `runc run` stays in the foreground
        argv: tuple[str, ...] = (*runc, "run", "--keep", "--bundle", str(bundle), name)
    else:  # detached: the supervisor, a subreaper, is the container's parent
        argv = (*logged, "run", "--detach", "--bundle", str(bundle))
        argv = (*argv, "--pid-file", str(pid_file), name)
    launch = LaunchSpec(
        argv=argv,
        pid_file="" if tty else str(pid_file),
        output_owner=ids.host_id(0),
        runtime_log=str(runtime_log),
        context=ProcessContext(
            env=(("PATH", DEFAULT_PATH),), cwd=str(bundle), privileged=True, seccomp=False
        ),
        instance_dir=str(instance.path),
        log_max_bytes=settings.log_max_bytes,
        log_max_files=settings.log_max_files,
        kill_argv=(*runc, "kill", name, "KILL"),
        delete_argv=(*runc, "delete", "--force", name),
        runtime_cgroup=str(memory_cgroup(container.cgroups_path or "")),
        exec_prefix=(*runc, "exec"),
        exec_target=name,
        stdin_pipe=bool(config.spec.get("stdin")),
        stdin_once=bool(config.spec.get("stdinOnce")),
        tty=tty,
    )
    return Prepared(launch, result.image.image_id)


def _sandbox_gone(error: Exception) -> ExitRecord:
    return ExitRecord(
        exit_code=EXIT_CANNOT_RUN,
        finished_ns=time.time_ns(),
        reason="ContainerCannotRun",
        message=f"the pod's sandbox is not running: {error}",
    )


async def _delete_earlier_runs(node: OciNode, pod_uid: str, name: str) -> None:
    """Earlier runs of this container that runc still has: a supervisor killed hard
    leaves the container running, which must not run on beside the new one. Found by
    their state directories in runc's root (one listing, not a `runc list` that reads
    every container of the node)."""
    prefix = container_id(pod_uid, name, 0)[:-1]
    try:
        names = os.listdir(node.runc.root)
    except FileNotFoundError:
        return
    for entry in names:
        if entry.startswith(prefix) and entry[len(prefix) :].isdigit():
            with contextlib.suppress(RuncError):
                await node.runc.delete(entry, force=True)


def memory_cgroup(cgroups_path: str) -> Path:
    """Where runc makes a container's memory cgroup for `cgroupsPath` (cgroupfs: below
    the hierarchy's root; the unified hierarchy on a v2-only host)."""
    root = CGROUP_ROOT if (CGROUP_ROOT / "cgroup.controllers").exists() else CGROUP_ROOT / "memory"
    return root / cgroups_path.lstrip("/")


def unused_spec(instance: InstanceDir) -> LaunchSpec:
    """A spec for a run that is refused before it starts (never launched)."""
    return LaunchSpec(
        argv=("false",),
        context=ProcessContext(env=(), cwd="/"),
        instance_dir=str(instance.path),
        log_max_bytes=4096,
        log_max_files=1,
    )


def _with_cgroup(container: spec.Container, pod_uid: str, leaf: str) -> spec.Container:
    return replace(container, cgroups_path=cgroups_path(pod_uid, leaf))


async def _container(
    node: OciNode,
    pod: PodConfig,
    pod_dir: PodDir,
    config: ContainerConfig,
    image: Any,
    rootfs: Path,
    ids: PodRange,
    joined: dict[str, str | None],
    pod_env: list[tuple[str, str]],
) -> spec.Container:
    pod_spec = pod.pod.get("spec") or {}
    pod_security = pod_spec.get("securityContext") or {}
    security = config.spec.get("securityContext") or {}

    def pick(name: str) -> Any:
        value = security.get(name)
        return pod_security.get(name) if value is None else value

    who = user(
        image,
        rootfs,
        run_as_user=_optional_int(pick("runAsUser")),
        run_as_group=_optional_int(pick("runAsGroup")),
        run_as_non_root=bool(pick("runAsNonRoot")),
    )
    extra = list(who.additional_gids)
    for gid in [pod_security.get("fsGroup"), *(pod_security.get("supplementalGroups") or [])]:
        if gid is not None and int(gid) not in extra and int(gid) != who.gid:
            extra.append(int(gid))
    for value in (who.uid, who.gid, *extra):
        ids.host_id(value)  # ValueError: outside the pod's user namespace
    env = environment(image, pod_env)
    if not any(name == "PATH" for name, _ in env):
        env.insert(0, ("PATH", DEFAULT_PATH))
    process = spec.Process(
        args=command_line(image, config.command, config.args),
        env=dict(env),
        cwd=working_dir(image, config.spec.get("workingDir")),
        uid=who.uid,
        gid=who.gid,
        additional_gids=tuple(extra),
        terminal=bool(config.spec.get("tty")),
    )
    capabilities = security.get("capabilities") or {}
    privileged = bool(security.get("privileged"))
    profile = (security.get("seccompProfile") or pod_security.get("seccompProfile") or {}).get(
        "type"
    )
    unconfined = profile == "Unconfined" and "unconfined" in node.config.allow
    choice = spec.Seccomp("Unconfined") if unconfined else node.runtime_default
    joined = dict(joined)
    target = ociephemeral.target_of(config)
    if target is not None:  # kubectl debug --target: the target's processes
        joined["pid"] = await ociephemeral.target_pid_namespace(node.runc, pod.ref.uid, target)
    mapping = spec.pod_mapping(ids.base, ids.size) if "user" in joined else ()
    return spec.Container(
        process=process,
        rootfs=str(rootfs),
        namespaces=joined,
        uid_mappings=mapping,
        gid_mappings=mapping,
        security=spec.Security(
            capabilities_add=tuple(str(c) for c in capabilities.get("add") or ()),
            capabilities_drop=tuple(str(c) for c in capabilities.get("drop") or ()),
            privileged=privileged,
            allow_privilege_escalation=security.get("allowPrivilegeEscalation") is not False,
            read_only_root=bool(security.get("readOnlyRootFilesystem")),
            seccomp=choice,
        ),
        volumes=_volumes(pod_dir, pod, config, node.config.host_path_prefixes, joined.get("user")),
        resources=resources_of(config.spec.get("resources") or {}),
    )


def _volumes(
    pod_dir: PodDir,
    pod: PodConfig,
    config: ContainerConfig,
    prefixes: tuple[str, ...],
    userns: str | None,
) -> tuple[spec.BindMount, ...]:
    """The container's volume mounts (sandbox.container_mounts decides which host path
    each is) as bind mounts; a subPath is opened beneath its volume, and the bind's
    source is the entry found that way, never a link the pod planted. A hostPath
    (whatever lies outside the pod's directory) is id-mapped through the pod's user
    namespace `userns` (host_paths.py); a subPath missing in it is made first, as
    the kubelet makes it."""
    mounts = []
    own = pod_dir.path.resolve()
    entries = sandbox.container_mounts(pod_dir, pod, config, prefixes)
    for index, (base, relative, target, read_only) in enumerate(entries):
        host = not Path(base).resolve().is_relative_to(own)
        if not relative and not (host and userns):
            mounts.append(spec.BindMount(base, target, read_only))
            continue
        fd = (
            host_paths.open_made(base, relative)
            if host
            else beneath.open_path(base, relative, "subPath")
        )
        try:
            if host and userns:
                staged = pod_dir.container(config.name).path / host_paths.STAGED / str(index)
                source = host_paths.id_mapped(fd, staged, userns)
            else:
                source = os.readlink(f"/proc/self/fd/{fd}")
        finally:
            os.close(fd)
        mounts.append(spec.BindMount(source, target, read_only))
    return tuple(mounts)


def _milli(value: object) -> int | None:
    if value is None:
        return None
    try:
        return int(parse_quantity(str(value)) * 1000)
    except QuantityError:
        return None


def _bytes(value: object) -> int | None:
    if value is None:
        return None
    try:
        return int(parse_quantity(str(value)))
    except QuantityError:
        return None


def resources_of(resources: Mapping[str, Any]) -> spec.Resources:
    requests = resources.get("requests") or {}
    limits = resources.get("limits") or {}
    return spec.Resources(
        cpu_request_milli=_milli(requests.get("cpu")),
        cpu_limit_milli=_milli(limits.get("cpu")),
        memory_limit=_bytes(limits.get("memory")),
    )


def _optional_int(value: object) -> int | None:
    return None if value is None else int(str(value))
