"""The node's side of `runtime: oci`: runc, the image store, and each pod's sandbox.

With `runtime: oci` a pod is not host programs in namespaces vkpy makes by hand
(namespaces.py, podroot.py, seccomp.py) but OCI containers run by runc from their
images (vkpy/oci). `OciNode` holds what the node's pods share: one runc state
directory (containers are found again by id after a restart: adoption needs nothing
in memory), the node's image store and puller (mirrors from `registries`), the image
pull back-off, the host id ranges (idranges.py) and the RuntimeDefault seccomp
profile. Per pod it starts the sandbox container that holds the pod's user, network,
IPC and UTS namespaces (vkpy.oci.runtime.sandbox) with the pod's namespaced
sysctls, wires its network namespace to
the node with podnet.py when `network: pod`, and at removal deletes the pod's
containers, sandbox, cgroups and root filesystems before its id range is released.

The sandbox runs the node's pause image (`pod_infra_container_image`, the kubelet's
`--pod-infra-container-image`, `registry.k8s.io/pause:3.10` by default), pulled like
any image through the node's mirrors (IfNotPresent, no pull secret) and unpacked
once per node: it only holds the namespaces, as the image's user, on a read-only
root with no capability. Its root is an overlay on the image's tree (without an id
map: the user namespace is the sandbox's own, made after), whose top directory the
pod's root owns so runc can make its mount points. If the image cannot be had, the
pod stays Pending (CannotStartError, the kubelet's sandbox failure), never Failed.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import platform
import stat
from pathlib import Path

from vkpy.core.clock import SystemClock
from vkpy.oci.images import registries
from vkpy.oci.images.backoff import PullBackOff
from vkpy.oci.images.bases import Bases
from vkpy.oci.images.container import ContainerConfigError, User, command_line, user
from vkpy.oci.images.errors import ImageError
from vkpy.oci.images.pull import Puller
from vkpy.oci.images.store import ImageStore, node_store
from vkpy.oci.images.unpack import IdMap, remove_rootfs, unpack
from vkpy.oci.runtime import overlay, seccomp, spec
from vkpy.oci.runtime.runc import ContainerNotFound, Runc, RuncError
from vkpy.oci.runtime.sandbox import PodSandbox, SandboxConfig, sandbox_security
from vkpy.providers.base import PodConfig
from vkpy.providers.errors import CannotStartError
from vkpy.providers.process import namespaces, ocihost, podnet, sysctls
from vkpy.providers.process.addresses import PodAddress
from vkpy.providers.process.config import ProcessConfig
from vkpy.providers.process.idranges import IdRanges, PodRange
from vkpy.providers.process.layout import PodDir
from vkpy.providers.process.sandbox import unmount_volumes

log = logging.getLogger(__name__)

CGROUP_ROOT = Path("/sys/fs/cgroup")
CGROUP_PARENT = "vkpy"
ROOTFS = "rootfs"
IMAGE_OF_ROOT = "rootfs-image"
"""The manifest digest whose shared tree a container's overlay root lies on."""
UPPER = "rootfs-upper"
"""A container's own layer of its overlay root: what it wrote."""
WORK = "rootfs-work"
SANDBOX = "sandbox"
"""The sandbox's directory in the pod's: its bundle and its root's layers."""


def sandbox_id(pod_uid: str) -> str:
    return f"vkpy-{pod_uid}"


def container_id(pod_uid: str, name: str, instance: int) -> str:
    return f"vkpy-{pod_uid}-{name}-{instance}"


def cgroups_path(pod_uid: str, leaf: str) -> str:
    return f"/{CGROUP_PARENT}/{pod_uid}/{leaf}"


class OciNode:
    def __init__(self, config: ProcessConfig, ranges: IdRanges | None = None) -> None:
        self.config = config
        base = Path(config.state_dir or ".").absolute()
        self.work = base / "process" / "oci"
        self.runc = Runc(self.work / "runc", config.runc)
        self.store: ImageStore = node_store(base)
        self.puller = Puller(self.store, registries.from_config(config.registries))
        self.backoff = PullBackOff(SystemClock())
        self.ranges = ranges or IdRanges(config.oci_id_base, config.oci_id_ranges)
        self.platform = spec.Platform(
            machine=platform.machine(),
            kernel=seccomp.kernel_version(platform.release()),
            allow_privileged="privileged" in config.allow,
        )
        self.runtime_default = spec.Seccomp("RuntimeDefault", seccomp.load(seccomp.RUNTIME_DEFAULT))
        self.bases = Bases(self.store, self.work / "images")
        self.overlay = False
        """Containers' roots are overlays on shared image trees (overlay.py); else
        each container gets a copy of its image (set by `prepare`)."""

    def prepare(self) -> None:
        """The node's directories (once per start)."""
        self.work.mkdir(parents=True, exist_ok=True)
        os.chmod(self.work, 0o711)  # noqa: S103 (the pods' roots are below: traversable)
        self.overlay = overlay.supported(self.work / "overlay-check")
        if not self.overlay:
            log.warning(
                "this kernel cannot mount an overlay on an id-mapped layer given by "
                "descriptor (Linux 6.13+): each container gets a copy of its image"
            )
        self.prune_trees()

    def prune_trees(self) -> None:
        """Remove the unpacked trees of images the store no longer has (at start, and
        after image GC removed some), never one a container's or sandbox's root lies
        on (their records in the pods' directories)."""
        in_use = {
            record.read_text().strip()
            for pattern in (f"*/containers/*/{IMAGE_OF_ROOT}", f"*/{SANDBOX}/{IMAGE_OF_ROOT}")
            for record in self.config.pods_path.glob(pattern)
        }
        self.bases.prune(in_use)

    async def container_root(
        self,
        directory: Path,
        image_ref: str,
        manifest_digest: str,
        ids: PodRange,
        userns: str | None,
    ) -> Path:
        """The container's root filesystem in `directory` (kept across its restarts):
        an overlay on the image's shared tree, id-mapped through the pod's user
        namespace `userns` (None: not mapped); or, where the kernel cannot, a copy
        owned by the pod."""
        rootfs = directory / ROOTFS
        upper, work = directory / UPPER, directory / WORK
        if rootfs.is_mount():  # the overlay has a device of its own: one stat
            return rootfs
        if not self.overlay or (not upper.exists() and rootfs.exists() and any(rootfs.iterdir())):
            if not rootfs.exists():
                await unpack(self.store, image_ref, rootfs, IdMap(0, ids.base, ids.size))
            return rootfs  # a copy (also one an earlier vkpy unpacked)
        lower = await self.bases.tree(image_ref, manifest_digest)
        for place in (rootfs, work):
            place.mkdir(mode=0o755, parents=True, exist_ok=True)
        (directory / IMAGE_OF_ROOT).write_text(manifest_digest)
        if not upper.exists():
            # The overlay's root takes the upper layer's owner and mode: the image's
            # root directory's, mapped into the pod's range.
            top = os.stat(lower)
            upper.mkdir()
            os.chown(upper, ids.host_id(top.st_uid), ids.host_id(top.st_gid))
            os.chmod(upper, stat.S_IMODE(top.st_mode))
        overlay.mount(lower, upper, work, rootfs, userns)
        return rootfs

    async def _pause(self, pod_dir: PodDir, ids: PodRange) -> tuple[Path, list[str], User]:
        """The sandbox's root, argv and user, from the pause image (pulled if needed)."""
        image = self.config.pod_infra_container_image
        try:
            pulled = await self.puller.ensure(image, "IfNotPresent")
            ref = str(pulled.ref)
            config = self.store.config(ref)
            root = await self.container_root(
                pod_dir.path / SANDBOX, ref, pulled.image.manifest_digest, ids, None
            )
            return root, command_line(config, (), ()), user(config, root)
        except (ImageError, ContainerConfigError, ValueError) as error:
            raise CannotStartError(
                f'Failed to create pod sandbox: failed to get the sandbox image "{image}": {error}',
                reason="ContainerCreating",
            ) from error

    # --- pods ---------------------------------------------------------------------------

    async def start_pod(
        self, pod: PodConfig, pod_dir: PodDir, ids: PodRange, address: PodAddress | None
    ) -> None:
        """The pod's sandbox (started unless it runs) and its network (when it has an
        address of its own)."""
        sandbox = PodSandbox(self.runc, sandbox_id(pod.ref.uid))
        fresh = False
        try:
            if not (self.runc.root / sandbox.id).exists():  # no `runc state` to learn it
                raise ContainerNotFound([], 1, "no sandbox yet")
            state = await self.runc.state(sandbox.id)
            if state.status != "running":
                await sandbox.remove()
                raise ContainerNotFound([], 1, "not running")
        except ContainerNotFound:
            spec_ = pod.pod.get("spec") or {}
            # The host's ids for a pod in the host's user namespace, as its containers'.
            root, args, who = await self._pause(pod_dir, ocihost.effective_range(spec_, ids))
            config = SandboxConfig(
                rootfs=str(root),
                args=args,
                uid=who.uid,
                gid=who.gid,
                hostname=namespaces.hostname(spec_, pod.ref.name, pod.ref.namespace),
                host_id_base=None if ocihost.host_users(spec_) else ids.base,
                security=sandbox_security(self.runtime_default),
                share_process_namespace=bool(spec_.get("shareProcessNamespace")),
                cgroups_path=cgroups_path(pod.ref.uid, "sandbox"),
                sysctls={sysctls.dotted(name): value for name, value in sysctls.requested(spec_)},
            )
            state = await sandbox.start(pod_dir.path / SANDBOX, config, self.platform)
            fresh = True
        if address is not None and (fresh or not podnet.link_exists(address.link)):
            await asyncio.to_thread(
                podnet.connect, state.pid, address, self.config.node_name, pod.ref.uid
            )

    async def sandbox_pid(self, pod_uid: str) -> int | None:
        try:
            state = await self.runc.state(sandbox_id(pod_uid))
        except RuncError:
            return None
        return state.pid if state.status == "running" and state.pid > 0 else None

    async def remove_pod(self, pod_uid: str, pod_dir: Path) -> None:
        """Everything of the pod that runc and the images made: its containers (killed),
        its sandbox, its cgroups and its root filesystems. Its id range is released
        by the caller once this returned."""
        prefix = f"vkpy-{pod_uid}-"
        with contextlib.suppress(RuncError):
            for state in await self.runc.containers():
                if state.id.startswith(prefix):
                    with contextlib.suppress(RuncError):
                        await self.runc.delete(state.id, force=True)
        with contextlib.suppress(RuncError):
            await PodSandbox(self.runc, sandbox_id(pod_uid)).remove()
        self.backoff.forget(pod_uid)
        await asyncio.to_thread(_remove_pod_files, pod_uid, pod_dir)


def _remove_pod_files(pod_uid: str, pod_dir: Path) -> None:
    # Everything mounted below the pod's directory, in one reading of the mount
    # table: the overlay roots of its containers and sandbox, its tmpfs emptyDirs.
    unmount_volumes(pod_dir)
    containers = PodDir(pod_dir).containers
    places = [*containers.iterdir()] if containers.is_dir() else []
    for entry in [*places, pod_dir / SANDBOX]:
        for part in (ROOTFS, UPPER, WORK):
            if (entry / part).exists():
                remove_rootfs(entry / part)
    remove_cgroups(pod_uid)


def remove_cgroups(pod_uid: str) -> None:
    """The pod's cgroup directory in every hierarchy (runc removed its leaves)."""
    if not CGROUP_ROOT.is_dir():
        return
    places = [CGROUP_ROOT / CGROUP_PARENT / pod_uid]
    places += [entry / CGROUP_PARENT / pod_uid for entry in CGROUP_ROOT.iterdir()]
    for place in places:
        if not place.is_dir():
            continue
        for child in sorted(place.glob("**/"), key=lambda p: len(str(p)), reverse=True):
            with contextlib.suppress(OSError):
                child.rmdir()


def cgroup_dirs_of(pod_uid: str) -> list[Path]:
    """The pod's cgroup directories left in any hierarchy (for checks and tests)."""
    if not CGROUP_ROOT.is_dir():
        return []
    found = [CGROUP_ROOT / CGROUP_PARENT / pod_uid]
    found += [entry / CGROUP_PARENT / pod_uid for entry in CGROUP_ROOT.iterdir()]
    return [path for path in found if path.is_dir()]
