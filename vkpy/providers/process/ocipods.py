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

The sandbox's program is the host's static busybox (`sleep`) in a root of its own
(a stand-in for the pause image until the test registry serves one): it only holds
the namespaces, read-only, with no capability.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import platform
import shutil
from pathlib import Path

from vkpy.core.clock import SystemClock
from vkpy.oci.images import registries
from vkpy.oci.images.backoff import PullBackOff
from vkpy.oci.images.pull import Puller
from vkpy.oci.images.store import ImageStore, node_store
from vkpy.oci.images.unpack import remove_rootfs
from vkpy.oci.runtime import seccomp, spec
from vkpy.oci.runtime.runc import ContainerNotFound, Runc, RuncError
from vkpy.oci.runtime.sandbox import PodSandbox, SandboxConfig, sandbox_security
from vkpy.providers.base import PodConfig
from vkpy.providers.process import namespaces, ocivolumes, podnet, sysctls
from vkpy.providers.process.addresses import PodAddress
from vkpy.providers.process.config import ProcessConfig
from vkpy.providers.process.idranges import IdRanges, PodRange
from vkpy.providers.process.layout import PodDir

log = logging.getLogger(__name__)

CGROUP_ROOT = Path("/sys/fs/cgroup")
CGROUP_PARENT = "vkpy"
SANDBOX_PROGRAM = Path("/bin/busybox")
"""Debian's busybox-static: the sandbox's `sleep` (see the module docstring)."""
ROOTFS = "rootfs"
SANDBOX_ROOT = Path("/run/vkpy/oci-sandbox-root")
"""Host-wide (every node's sandboxes use it read-only), where the pods' mapped root
can reach it: runc's init walks to a root inside the pod's user namespace."""


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

    def prepare(self) -> None:
        """The node's directories and the sandbox's root (once per start)."""
        self.work.mkdir(parents=True, exist_ok=True)
        os.chmod(self.work, 0o711)  # noqa: S103 (the pods' roots are below: traversable)
        root = self.sandbox_root
        root.mkdir(parents=True, exist_ok=True)
        os.chmod(root.parent, 0o711)  # noqa: S103 (traversable, not listable)
        os.chmod(root, 0o755)  # noqa: S103 (runc's init opens it as the pod's root)
        for name in ("bin", "proc", "dev", "sys", "etc"):
            (root / name).mkdir(parents=True, exist_ok=True)
        program = root / "bin" / "busybox"
        if not program.exists():
            shutil.copy2(SANDBOX_PROGRAM, program)
            os.chmod(program, 0o755)  # noqa: S103 (read and run by the pods' mapped root)

    @property
    def sandbox_root(self) -> Path:
        return SANDBOX_ROOT

    # --- pods ---------------------------------------------------------------------------

    async def start_pod(
        self, pod: PodConfig, pod_dir: PodDir, ids: PodRange, address: PodAddress | None
    ) -> None:
        """The pod's sandbox (started unless it runs) and its network (when it has an
        address of its own)."""
        sandbox = PodSandbox(self.runc, sandbox_id(pod.ref.uid))
        fresh = False
        try:
            state = await self.runc.state(sandbox.id)
            if state.status != "running":
                await sandbox.remove()
                raise ContainerNotFound([], 1, "not running")
        except ContainerNotFound:
            spec_ = pod.pod.get("spec") or {}
            config = SandboxConfig(
                rootfs=str(self.sandbox_root),
                args=["/bin/busybox", "sleep", "2147483647"],
                hostname=namespaces.hostname(spec_, pod.ref.name, pod.ref.namespace),
                host_id_base=ids.base,
                security=sandbox_security(self.runtime_default),
                share_process_namespace=bool(spec_.get("shareProcessNamespace")),
                cgroups_path=cgroups_path(pod.ref.uid, "sandbox"),
                sysctls={sysctls.dotted(name): value for name, value in sysctls.requested(spec_)},
            )
            state = await sandbox.start(pod_dir.path / "sandbox", config, self.platform)
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
    ocivolumes.unmount_memory(PodDir(pod_dir))
    containers = PodDir(pod_dir).containers
    if containers.is_dir():
        for entry in containers.iterdir():
            rootfs = entry / ROOTFS
            if rootfs.exists():
                remove_rootfs(rootfs)
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
