"""The `process` backend: pods whose containers run as processes on this host.

This is vkpy's default backend: it needs no cloud account, and it is where logs,
exec, attach, port-forward and stats are real. Each container's `command` + `args`
runs under a small supervisor process that outlives vkpy (supervisor.py); the image
is only recorded. Pods live in directories under the state directory (layout.py),
with their volumes materialized and each container's mount paths linked into its
root (filesystem.py); the kubelet's semantics (init containers, restart policies with
CrashLoopBackOff, probes, hooks, graceful stop) are in pod.py and container.py.
On start the backend reads every pod directory back and adopts the supervisors that
still run (checked by pid and start time), so a restarted or killed vkpy loses
nothing. Honest isolation: containers are host processes, run as an unprivileged
user when vkpy is root, with a minimal environment; see docs/process-backend.md.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import os
import platform
import subprocess
from collections.abc import AsyncIterator, Sequence
from typing import Literal

from vkpy import __version__
from vkpy.core.cancelling import cancel_and_wait
from vkpy.core.clock import SystemClock
from vkpy.oci.runtime.runc import RuncError
from vkpy.oci.runtime.spec import SpecError
from vkpy.providers.base import (
    ByteSink,
    ByteSource,
    ContainerConfig,
    EventCallback,
    LogQuery,
    LogRecord,
    NodeInfo,
    NodeResources,
    PodConfig,
    PodEvent,
    PodRef,
    PodState,
    PodStats,
    StatusCallback,
    StreamIO,
)
from vkpy.providers.errors import (
    AdmissionError,
    CannotStartError,
    InvalidInputError,
    NotFoundError,
    ProviderError,
    RetryableError,
    UnsupportedError,
)
from vkpy.providers.process import (
    cgroups,
    idranges,
    modes,
    namespaces,
    ocipods,
    ocivolumes,
    owned,
    podnet,
    privileges,
    proc,
    sandbox,
    sysctls,
)
from vkpy.providers.process.actions import Actions
from vkpy.providers.process.addresses import (
    AddressPool,
    NoAddressError,
    PodAddress,
    overlapping,
)
from vkpy.providers.process.config import ProcessConfig, blocked_ancestor, resolve_run_as
from vkpy.providers.process.idclaims import HostClaims
from vkpy.providers.process.identity import IdPool, PodIdentity, kill_processes
from vkpy.providers.process.idranges import NoRangeError
from vkpy.providers.process.images import ImageTable
from vkpy.providers.process.layout import PodDir, remove_tree
from vkpy.providers.process.listening import pod_listener
from vkpy.providers.process.logs import read_logs
from vkpy.providers.process.ocigc import ImageGc, images_of
from vkpy.providers.process.ocipods import OciNode
from vkpy.providers.process.pod import PodRuntime
from vkpy.providers.process.records import MemoryMode
from vkpy.providers.process.runtime import Runtime
from vkpy.providers.process.standins import default_rules
from vkpy.providers.process.stats import Sampler
from vkpy.providers.process.streams import (
    attach,
    exec_argv,
    exec_command,
    forward_port,
    running_instance,
)
from vkpy.providers.process.validation import check_pod

log = logging.getLogger(__name__)

ISOLATION_LABEL = "vkpy.io/process-isolation"
"""Node label saying how pods are kept apart: `per-pod-users` (vkpy is root: a uid per
pod) or `shared-user` (one user for every pod: without root, or with `run_as`)."""
FILESYSTEM_LABEL = "vkpy.io/process-filesystem"
"""Node label saying what pods see: `pod-root` (a mount namespace per pod: the host
read-only, volumes at their mount paths; podroot.py) or `links` (the host as it is,
volumes as links in the pod's directory)."""
NETWORK_LABEL = "vkpy.io/network"
"""Node label: `pod` (a network namespace and an address per pod) or `host`."""
RUNTIME_LABEL = "vkpy.io/runtime"
"""Node label: `oci` (images run by runc, ocipods.py) or `host` (host programs)."""
_ARCHITECTURES = {"x86_64": "amd64", "aarch64": "arm64", "armv7l": "arm", "ppc64le": "ppc64le"}


def _os_image() -> str:
    try:
        with open("/etc/os-release") as handle:
            for line in handle:
                if line.startswith("PRETTY_NAME="):
                    return line.split("=", 1)[1].strip().strip('"')
    except OSError:
        pass
    return platform.platform()


def _check_cidr(cidr: str) -> None:
    """Refuse a pod CIDR that covers an address of the node's own network."""
    taken = overlapping(cidr, podnet.node_addresses())
    if taken:
        raise ValueError(
            f"pod CIDR {cidr} covers the node's own addresses {', '.join(taken)}: its "
            "pods' routes would take over the node's network"
        )


class ProcessProvider:
    """See the module docstring."""

    name = "process"
    reads_volume_files: Literal[True] = True
    reads_pull_secrets: Literal[True] = True
    """`runtime: oci` pulls with the pod's imagePullSecrets (ocicontainers.py)."""

    def __init__(self, config: ProcessConfig) -> None:
        self._config = config
        self._pods: dict[str, PodRuntime] = {}
        self._callback: StatusCallback | None = None
        self._event_callback: EventCallback | None = None
        self._runtime: Runtime | None = None
        self._image_gc: asyncio.Task[None] | None = None
        self._sampler = Sampler()
        self._node_cidr = ""
        """The Node's IPv4 spec.podCIDR, once known (set_pod_cidrs)."""
        self._capacity = config.node_capacity()
        # The Python stand-ins run as the containers' user: vkpy's interpreter may sit
        # where that user cannot reach it (a venv under /root), the host's python3 not.
        own_user = resolve_run_as(config.run_as).uid is None
        self._images = ImageTable(
            config.images, default_rules(config.python if own_user else "python3")
        )

    # --- the backend --------------------------------------------------------------------

    def on_status_change(self, callback: StatusCallback) -> None:
        self._callback = callback

    def _notify(self, ref: PodRef) -> None:
        if self._callback is not None:
            self._callback(ref)

    def on_event(self, callback: EventCallback) -> None:
        self._event_callback = callback

    def _report_event(self, ref: PodRef, event: PodEvent) -> None:
        if self._event_callback is not None:
            self._event_callback(ref, event)

    def _memory_mode(self) -> tuple[MemoryMode, cgroups.CgroupParent | None]:
        wanted = self._config.memory_enforcement
        if wanted in ("watchdog", "none"):
            return wanted, None
        parent = cgroups.detect(self._config.cgroup_parent or None)
        if parent is not None:
            return "cgroup", parent
        if wanted == "cgroup":
            raise UnsupportedError(
                "memory_enforcement is cgroup but no cgroup with a writable memory controller "
                "was found (set cgroup_parent to a delegated cgroup)"
            )
        return "watchdog", None

    def set_pod_cidrs(self, cidrs: Sequence[str]) -> None:
        """The Node's spec.podCIDRs: its IPv4 one replaces `pod_cidr` (addresses held
        stay held); before `start`, kept for it."""
        ipv4 = next((c for c in cidrs if ":" not in c), "")
        if not ipv4 or ipv4 == self._node_cidr:
            return
        self._node_cidr = ipv4
        self._use_node_cidr()

    def _use_node_cidr(self) -> None:
        if self._runtime is None or not self._config.pod_network or not self._node_cidr:
            return
        try:
            _check_cidr(self._node_cidr)
            self._runtime.addresses.set_cidr(self._node_cidr)
        except ValueError as error:
            log.warning("cannot use the Node's podCIDR", extra={"error": str(error)})
            return
        log.info("pod addresses from the Node's podCIDR", extra={"pod_cidr": self._node_cidr})

    async def start(self) -> None:
        config = self._config
        if config.oci:
            if os.geteuid() != 0:
                raise UnsupportedError(
                    "runtime: oci needs vkpy to run as root (user namespaces, runc)"
                )
            missing = modes.missing_tools(config.runc)
            if missing:  # never stand-ins where images were meant
                raise UnsupportedError(
                    modes.missing_tools_message(missing, config.runtime_defaulted)
                )
        run_as = resolve_run_as(config.run_as)
        mode, parent = self._memory_mode()
        first, last = config.uid_range()
        claims = HostClaims() if config.per_pod_ids else None
        if config.network == "pod" and not config.pod_network:
            raise UnsupportedError(
                "network: pod needs vkpy to run as root with pod_namespaces (a network "
                "namespace per pod)"
            )
        if config.pod_network and config.pod_cidr:
            try:
                _check_cidr(config.pod_cidr)
            except ValueError as error:
                raise UnsupportedError(str(error)) from None
        oci: OciNode | None = None
        if config.oci:
            oci = OciNode(config)
            await asyncio.to_thread(oci.prepare)
        self._runtime = Runtime(
            oci=oci,
            config=config,
            run_as=run_as,
            actions=Actions(config.python, config.internal_ip),
            cgroup=parent,
            memory_mode=mode,
            pool=IdPool(first, last, config.per_pod_ids, run_as, claims, config.allow),
            report_event=self._report_event,
            addresses=AddressPool(config.pod_cidr),
        )
        self._use_node_cidr()
        pods = config.pods_path
        pods.mkdir(parents=True, exist_ok=True)
        os.chmod(pods, 0o711)  # noqa: S103 (traversable, not listable)
        blocked = blocked_ancestor(pods, run_as)
        if blocked is not None and oci is not None:
            # runc mounts each pod's root filesystem and volumes from below pods_dir as
            # the pod's mapped (unprivileged) ids: every pod would fail to start.
            raise UnsupportedError(
                f"runtime: oci: pods cannot reach pods_dir {pods}, as {blocked} is not "
                "searchable by other users (runc mounts their root filesystems from there "
                "as the pods' unprivileged ids): set pods_dir (or --state-dir) under a "
                "directory others may traverse (o+x), such as the default /var/lib/vkpy"
            )
        if blocked is not None:
            log.warning(
                "containers cannot reach their directory by its absolute path; relative "
                "paths work, programs that use getcwd() may not: set pods_dir under a "
                "directory their user can traverse",
                extra={"directory": str(blocked), "user": run_as.name, "pods_dir": str(pods)},
            )
        others = 0
        for entry in sorted(pods.iterdir()):
            if not entry.is_dir():
                continue
            identity = PodIdentity.load(entry)
            if identity is not None and identity.node != config.node_name:
                others += 1  # another node's pod (a shared pods_dir): never ours to touch
                continue
            if identity is not None:
                self._runtime.pool.hold(entry.name, identity, entry.absolute())
            address = PodAddress.load(entry)
            if address is not None:
                self._runtime.addresses.hold(entry.name, address)
            if oci is not None:
                ids = idranges.load(entry)
                if ids is not None:
                    oci.ranges.claim(entry.absolute())
            pod = PodRuntime.load(self._runtime, PodDir(entry), self._notify)
            if pod is None:
                # pod.json is written before any container starts: nothing runs here.
                log.warning("removing an unfinished pod directory", extra={"path": str(entry)})
                await asyncio.to_thread(self._remove, entry.name)
                continue
            self._pods[pod.ref.uid] = pod
            try:
                if oci is not None:
                    await self._start_sandbox(pod.config, pod.dir)
                await asyncio.to_thread(self._start_namespaces, pod.config)
            except (OSError, subprocess.SubprocessError, RuncError) as error:
                log.warning(
                    "cannot make the pod's namespaces again",
                    extra={"pod": str(pod.ref), "error": str(error)},
                )
            pod.start()
            self._notify(pod.ref)
        await asyncio.to_thread(self._remove_orphan_links)
        if oci is not None:
            collector = ImageGc(
                oci.store, self._images_in_use, SystemClock(), after_removal=oci.prune_trees
            )
            self._image_gc = asyncio.create_task(collector.run(), name="image-gc")
        running = sum(1 for p in self._pods.values() for c in p.containers if c.supervised)
        log.info(
            "process backend ready",
            extra={
                "pods": len(self._pods),
                "running_containers": running,
                "run_as": run_as.name,
                "memory_limits": mode,
                "cgroup": str(parent.path) if parent else "",
                "pods_dir": str(pods),
                "pod_ids": f"{first}-{last}" if config.per_pod_ids else "shared",
                "other_nodes_pods": others,
                "network": config.network if config.pod_network else "host",
                "pod_cidr": self._runtime.addresses.cidr,
            },
        )

    def _remove_orphan_links(self) -> None:
        """Remove the veth pairs this node made for pods it no longer has."""
        if not self._config.pod_network:
            return
        for uid, link in podnet.own_links(self._config.node_name).items():
            if uid not in self._pods:
                log.warning("removing the network of a pod that is gone", extra={"link": link})
                try:
                    podnet.disconnect(link)
                except OSError as error:
                    log.warning("cannot remove a veth pair", extra={"error": str(error)})

    def _images_in_use(self) -> list[str]:
        """`runtime: oci`: what image GC keeps: the images of every pod of the node,
        by name and by the digest its containers run, and the sandbox image."""
        pods = list(self._pods.values())
        digests = [c.image_id for pod in pods for c in pod.containers if c.image_id]
        # and the sandbox image, as the kubelet pins its own: every new pod needs it,
        # and an offline node could not pull it again
        sandbox = self._config.pod_infra_container_image
        return [*images_of(pod.config for pod in pods), *digests, sandbox]

    async def close(self) -> None:
        if self._image_gc is not None:
            await cancel_and_wait(self._image_gc)
            self._image_gc = None
        for pod in self._pods.values():
            await pod.close()
        if self._runtime is not None:
            await self._runtime.actions.close()

    def node_info(self) -> NodeInfo:
        machine = platform.machine()
        return NodeInfo(
            operating_system="linux",
            architecture=_ARCHITECTURES.get(machine, machine),
            runtime_name="process",
            runtime_version=__version__,
            kernel_version=platform.release(),
            os_image=_os_image(),
            labels={
                ISOLATION_LABEL: "per-pod-users" if self._config.per_pod_ids else "shared-user",
                FILESYSTEM_LABEL: "pod-root" if self._config.filesystem_per_pod else "links",
                NETWORK_LABEL: "pod" if self._config.pod_network else "host",
                RUNTIME_LABEL: self._config.runtime,
            },
        )

    def node_resources(self) -> NodeResources:
        return NodeResources(capacity=self._capacity, allocatable=self._capacity)

    async def ping(self) -> None:
        if not os.access(self._config.pods_path, os.W_OK | os.X_OK):
            raise RetryableError(f"pod directory {self._config.pods_path} is not writable")

    # --- pods ---------------------------------------------------------------------------

    def _runtime_or_fail(self) -> Runtime:
        if self._runtime is None:
            raise RetryableError("the process backend has not started yet")
        return self._runtime

    def image_user(self, image: str) -> int | None:
        """The user an image's stand-in runs as (its `user` in the `images` setting);
        in `runtime: oci` none: the image's USER is resolved inside the pod."""
        if self._config.oci:
            return None
        return self._images.image_user(image)

    def _pod(self, ref: PodRef) -> PodRuntime:
        pod = self._pods.get(ref.uid)
        if pod is None:
            raise NotFoundError(f"the process backend has no pod {ref}")
        return pod

    async def create_pod(self, pod: PodConfig) -> None:
        runtime = self._runtime_or_fail()
        if pod.ref.uid in self._pods:
            return
        if runtime.oci is not None:
            await self._create_oci_pod(runtime, runtime.oci, pod)
            return
        pod = self._images.resolve_pod(pod)
        check_pod(pod, self._config.host_path_prefixes)
        self._check_sysctls(pod)
        pod_dir = PodDir(self._config.pods_path / pod.ref.uid)
        identity = runtime.pool.allocate(pod, self._config.node_name, pod_dir.path.absolute())
        try:
            pod_dir.path.mkdir(mode=0o700, exist_ok=True)
            identity.save(pod_dir.path)
            self._allocate_address(runtime, pod, pod_dir)
            await asyncio.to_thread(self._start_namespaces, pod)
            created = await PodRuntime.create(runtime, pod, pod_dir, self._notify)
        except FileNotFoundError as error:
            await asyncio.to_thread(self._remove, pod.ref.uid)
            raise InvalidInputError(str(error.args[0]), reason="FailedMount") from None
        except OSError as error:
            await asyncio.to_thread(self._remove, pod.ref.uid)
            raise RetryableError(f"cannot prepare the pod's directory: {error}") from error
        self._pods[pod.ref.uid] = created
        created.start()
        self._notify(pod.ref)

    async def _create_oci_pod(self, runtime: Runtime, oci: OciNode, pod: PodConfig) -> None:
        """`runtime: oci`: the pod's id range, address and sandbox, then its containers
        (each pulls its image and runs through runc, ocicontainers.py)."""
        check_pod(pod, self._config.host_path_prefixes, images=True)
        privileges.check_host_access(pod, self._config.allow)
        self._check_sysctls(pod)
        pod_dir = PodDir(self._config.pods_path / pod.ref.uid)
        pod_dir.path.mkdir(mode=0o711, exist_ok=True)
        try:
            oci.ranges.claim(pod_dir.path.absolute())
        except NoRangeError as error:
            remove_tree(pod_dir.path)
            raise RetryableError(str(error)) from None
        try:
            self._allocate_address(runtime, pod, pod_dir)
            ids = await self._start_sandbox(pod, pod_dir)
            await asyncio.to_thread(ocivolumes.prepare_empty_dirs, pod, pod_dir, ids)
            created = await PodRuntime.create(runtime, pod, pod_dir, self._notify)
        except (FileNotFoundError, ValueError) as error:
            await self._remove_oci(pod.ref.uid)
            raise InvalidInputError(str(error.args[0]), reason="FailedMount") from None
        except CannotStartError:  # no sandbox image: Pending, tried again
            await self._remove_oci(pod.ref.uid)
            raise
        except (OSError, RuncError, SpecError) as error:
            await self._remove_oci(pod.ref.uid)
            raise RetryableError(f"cannot start the pod's sandbox: {error}") from error
        self._pods[pod.ref.uid] = created
        created.start()
        self._notify(pod.ref)

    async def _start_sandbox(self, pod: PodConfig, pod_dir: PodDir) -> idranges.PodRange:
        runtime = self._runtime_or_fail()
        assert runtime.oci is not None
        ids = idranges.load(pod_dir.path)
        if ids is None:
            raise OSError(f"the pod has no id range ({pod_dir.path / idranges.RECORD})")
        address = runtime.addresses.address(pod.ref.uid)
        await runtime.oci.start_pod(pod, pod_dir, ids, address)
        return ids

    async def _remove_oci(self, uid: str) -> None:
        """`runtime: oci`: runc's containers and sandbox, cgroups and root filesystems,
        then the pod's directory; its id range is released last."""
        runtime = self._runtime_or_fail()
        assert runtime.oci is not None
        path = self._config.pods_path / uid
        ids = idranges.load(path)
        await runtime.oci.remove_pod(uid, path.absolute())
        await asyncio.to_thread(self._remove, uid)
        if ids is not None:
            runtime.oci.ranges.release(ids.slot, path.absolute())

    def _check_sysctls(self, pod: PodConfig) -> None:
        """Refuse sysctls the pod could only set in the host's namespaces."""
        spec = pod.pod.get("spec") or {}
        kinds: tuple[str, ...] = ()
        if self._config.oci:
            # The pod's sandbox holds its IPC namespace, and its network namespace
            # when the pod has a network of its own (ocipods.py).
            own_network = self._config.pod_network and not spec.get("hostNetwork")
            kinds = ("ipc", "net") if own_network else ("ipc",)
        elif self._config.namespaces_per_pod:
            kinds = namespaces.wanted(
                spec, network=self._config.pod_network, filesystem=self._config.filesystem_per_pod
            )
        why = sysctls.refusal(spec, kinds)
        if why is not None:
            raise AdmissionError(why, reason="SysctlForbidden")

    def _allocate_address(self, runtime: Runtime, pod: PodConfig, pod_dir: PodDir) -> None:
        """The pod's own address (`network: pod`), recorded before its network is made."""
        if not self._config.pod_network or (pod.pod.get("spec") or {}).get("hostNetwork"):
            return
        try:
            address = runtime.addresses.allocate(pod.ref.uid, podnet.link_name(pod.ref.uid))
        except NoAddressError as error:
            raise RetryableError(str(error)) from None
        address.save(pod_dir.path)

    def _start_namespaces(self, pod: PodConfig) -> None:
        """The pod's namespaces (namespaces.py), its filesystem (podroot.py) and its
        network (podnet.py), when vkpy may make them; a holder that is gone is
        replaced, and its network rewired."""
        if not self._config.namespaces_per_pod:
            return
        spec = pod.pod.get("spec") or {}
        filesystem = self._config.filesystem_per_pod
        kinds = namespaces.wanted(spec, network=self._config.pod_network, filesystem=filesystem)
        path = self._config.pods_path / pod.ref.uid
        holder = namespaces.load(path)
        fresh = False
        if kinds and (holder is None or not holder.alive()):
            plan = None
            if filesystem:
                pod_dir = PodDir(path)
                sandbox.mount_memory_volumes(pod_dir, pod)
                ip = self._runtime_or_fail().pod_ip(pod.ref)
                plan = sandbox.plan(self._config, pod_dir, pod, ip, self._images.files(pod))
            holder = namespaces.start(
                path,
                kinds,
                namespaces.hostname(spec, pod.ref.name, pod.ref.namespace),
                plan=plan,
                python=self._config.python,
            )
            fresh = True
        if holder is None:
            return
        address = self._runtime_or_fail().addresses.address(pod.ref.uid)
        wired = "net" in holder.kinds and address is not None
        if address is not None and wired and (fresh or not podnet.link_exists(address.link)):
            podnet.connect(holder.pid, address, self._config.node_name, pod.ref.uid)
        if fresh:  # after the network's own settings: the pod's win
            sysctls.apply(holder.pid, spec)

    def _remove(self, uid: str) -> None:
        """Remove what is left of one of this node's pods: every process still running
        as its own ids, then its directory; only then are its ids free again."""
        runtime = self._runtime_or_fail()
        kill_processes(runtime.pool.exclusive_ids(uid))
        address = runtime.addresses.address(uid) or PodAddress.load(self._config.pods_path / uid)
        if address is not None:
            podnet.disconnect(address.link)
        namespaces.stop(self._config.pods_path / uid)
        sandbox.unmount_volumes(self._config.pods_path / uid)
        # What its own id owns outside its directory (owned.py): removed from the
        # host's scratch directories, and its hostPaths keep the id from reuse.
        places = owned.host_paths(PodDir(self._config.pods_path / uid))
        identity = runtime.pool.identity(uid)
        if identity and identity.own is not None and not self._config.filesystem_per_pod:
            owned.clean_scratch(frozenset({identity.own}), self._config.pods_path)
        remove_tree(self._config.pods_path / uid)
        runtime.pool.release(uid, places)
        runtime.addresses.release(uid)

    async def update_pod(self, pod: PodConfig) -> None:
        if not self._config.oci:
            pod = self._images.resolve_pod(pod)
        await self._pod(pod.ref).update(pod)

    async def delete_pod(self, ref: PodRef, grace_period: float) -> PodState | None:
        pod = self._pods.get(ref.uid)
        if pod is None:
            if self._runtime is not None and self._runtime.oci is not None:
                if (self._config.pods_path / ref.uid).exists():
                    await self._remove_oci(ref.uid)
            elif self._runtime is not None and self._runtime.pool.identity(ref.uid) is not None:
                await asyncio.to_thread(self._remove, ref.uid)
            raise NotFoundError(f"the process backend has no pod {ref}")
        await pod.stop(grace_period)
        last = pod.state()
        self._pods.pop(ref.uid, None)
        if self._runtime is not None and self._runtime.oci is not None:
            await self._remove_oci(ref.uid)
        else:
            await asyncio.to_thread(self._remove, ref.uid)
        log.info("pod stopped and removed", extra={"pod": str(ref), "uid": ref.uid})
        return last

    async def get_pod_status(self, ref: PodRef) -> PodState:
        return self._pod(ref).state()

    async def list_pods(self) -> Sequence[PodRef]:
        return [pod.ref for pod in self._pods.values()]

    async def run_ephemeral_containers(
        self, ref: PodRef, containers: Sequence[ContainerConfig]
    ) -> None:
        if not self._config.oci:  # host programs for images; in oci the image itself
            containers = [self._images.resolve(c) for c in containers]
        await self._pod(ref).add_ephemeral(containers)

    async def refresh_volumes(self, pod: PodConfig) -> None:
        await self._pod(pod.ref).refresh_volumes(pod)

    # --- logs and stats -----------------------------------------------------------------

    async def container_logs(self, ref: PodRef, query: LogQuery) -> AsyncIterator[LogRecord]:
        pod = self._pod(ref)
        runner = pod.container(query.container)
        if runner is None:
            raise NotFoundError(f'container "{query.container}" is not in pod "{ref.name}"')
        async for record in read_logs(runner, ref.name, query):
            yield record

    async def pod_stats(self) -> Sequence[PodStats]:
        return await asyncio.to_thread(self._sampler.sample, list(self._pods.values()))

    # --- exec, attach, port-forward (streams.py) ----------------------------------------

    async def exec_in_container(
        self, ref: PodRef, container: str, command: Sequence[str], io: StreamIO
    ) -> int:
        runner = self._pod(ref).container(container)
        instance = running_instance(runner, container)
        assert runner is not None
        oci = self._runtime.oci if self._runtime is not None else None
        if oci is not None:
            if not command:
                raise InvalidInputError("no command to run")
            name = ocipods.container_id(ref.uid, container, runner.instance)
            runc = [oci.runc.binary, "--root", str(oci.runc.root), "exec"]
            return await exec_argv([*runc, *(["-t"] if io.tty else []), name, *command], io)
        argv = self._images.command(runner.config, command)
        return await exec_command(self._config.python, instance, argv, io)

    async def attach_to_container(self, ref: PodRef, container: str, io: StreamIO) -> int | None:
        runner = self._pod(ref).container(container)
        running_instance(runner, container)
        assert runner is not None
        return await attach(runner, io)

    async def port_forward(
        self, ref: PodRef, port: int, inbound: ByteSource, outbound: ByteSink
    ) -> None:
        pod = self._pod(ref)
        oci = self._runtime.oci if self._runtime is not None else None
        if oci is not None and self._config.pod_network:
            pid = await oci.sandbox_pid(ref.uid)
            if pid is None:
                raise ProviderError(f"the sandbox of pod {ref} is not running")
            connect = functools.partial(podnet.connect_in, pid, port)
            await forward_port("127.0.0.1", port, inbound, outbound, connect=connect)
            return
        holder = namespaces.load(pod.dir.path)
        if holder is not None and "net" in holder.kinds and holder.alive():
            # The pod's own network: connect inside it, as a kubelet does.
            connect = functools.partial(podnet.connect_in, holder.pid, port)
            await forward_port("127.0.0.1", port, inbound, outbound, connect=connect)
            return
        address = await asyncio.to_thread(pod_listener, self._pod_pids(pod), port)
        if address is None:
            # What a kubelet reports when nothing listens in the pod's network namespace;
            # whatever else listens on this port of the host is never reached.
            raise ProviderError(f"dial tcp 127.0.0.1:{port}: connect: connection refused")
        await forward_port(address, port, inbound, outbound)

    def _pod_pids(self, pod: PodRuntime) -> set[int]:
        """The pod's processes: its containers' sessions, and whatever runs as its own ids."""
        leaders = {
            runner.run_record.pid
            for runner in pod.containers
            if runner.supervised is not None and runner.run_record is not None
        }
        # A container's session: its main process's (a detached runc container's
        # init is in the session `runc run --detach` made, not one of its own).
        processes = proc.every()
        sessions = {p.session for p in processes if p.pid in leaders}
        pids = {p.pid for p in processes if p.session in sessions and p.state not in ("Z", "X")}
        ids = self._runtime.pool.exclusive_ids(pod.ref.uid) if self._runtime else frozenset()
        if ids:
            pids.update(proc.pids_of_users(ids))
        return pids
