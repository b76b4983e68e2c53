"""A pod sandbox: the namespaces a pod's containers share, held by a sandbox container.

As the CRI's pause container, the sandbox is a container of its own (a process that
only waits, from a small root filesystem) that runc starts in new user, network, IPC
and UTS namespaces (and a PID namespace when the pod shares one): the pod's user
namespace maps its ids 0-65535 to the pod's host range, its network namespace has
the pod's loopback (and later its veth), its UTS namespace the pod's hostname. The
pod's containers join them by path, `/proc/<sandbox pid>/ns/<kind>`, and get their
own mount namespace (their own root) and, unless the pod shares one, PID namespace.

This replaces the process backend's namespace holder (namespaces.py: `unshare` and
`sleep` started with `setsid -f`, recorded in namespaces.json, joined with setns by
enter.py). The sandbox lives in runc's state directory, so a restarted vkpy finds it
by its id (`PodSandbox(runc, sandbox_id)` then `namespaces()`); nothing of it is kept
in memory. Its pid is read from `runc state` whenever the paths are needed, and a
sandbox that is not running gives no paths (ContainerNotFound or SandboxNotRunning)
rather than a pid that may since belong to another process.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from vkpy.oci.runtime import spec
from vkpy.oci.runtime.runc import Runc, State, write_bundle

SHARED = ("user", "network", "ipc", "uts")
"""The namespaces every container of a pod shares (and "pid" with
shareProcessNamespace)."""
PROC_NAMES = {"user": "user", "network": "net", "ipc": "ipc", "uts": "uts", "pid": "pid"}


class SandboxNotRunning(RuntimeError):
    """The sandbox exists but its process does not run: its namespaces are gone."""


def sandbox_security(seccomp: spec.Seccomp) -> spec.Security:
    """What the sandbox's process needs: nothing (no capability, a read-only root)."""
    return spec.Security(capabilities_drop=("ALL",), read_only_root=True, seccomp=seccomp)


@dataclass(frozen=True)
class SandboxConfig:
    """The pod's side of its sandbox. `host_id_base` is the start of the pod's host id
    range (ids 0..id_range_size-1 map there); None keeps the host's user namespace
    (`hostUsers: true`, where the node allows it). `security` is usually
    `sandbox_security(the node's RuntimeDefault)`."""

    rootfs: str
    args: Sequence[str]
    hostname: str
    host_id_base: int | None
    security: spec.Security
    id_range_size: int = 65536
    share_process_namespace: bool = False
    cgroups_path: str | None = None
    sysctls: Mapping[str, str] = field(default_factory=dict)
    """The pod's `securityContext.sysctls`: namespaced ones, set in its sandbox."""
    uid: int = 0
    gid: int = 0
    """Who the sandbox's process is in the pod (the pause image's USER, 65535)."""


class PodSandbox:
    """The sandbox container `sandbox_id` in `runc`'s state directory."""

    def __init__(self, runc: Runc, sandbox_id: str) -> None:
        self.runc = runc
        self.id = sandbox_id

    def kinds(self, share_process_namespace: bool) -> tuple[str, ...]:
        return (*SHARED, "pid") if share_process_namespace else SHARED

    def bundle_spec(self, config: SandboxConfig, platform: spec.Platform) -> dict[str, object]:
        """The sandbox container's config.json: every shared namespace a new one."""
        mappings = (
            spec.pod_mapping(config.host_id_base, config.id_range_size)
            if config.host_id_base is not None
            else ()
        )
        kinds = [
            kind
            for kind in self.kinds(config.share_process_namespace)
            if kind != "user" or config.host_id_base is not None
        ]
        if "pid" not in kinds:
            kinds.append("pid")
        container = spec.Container(
            process=spec.Process(args=config.args, uid=config.uid, gid=config.gid),
            rootfs=config.rootfs,
            hostname=config.hostname,
            namespaces=dict.fromkeys(kinds),
            uid_mappings=mappings,
            gid_mappings=mappings,
            security=config.security,
            cgroups_path=config.cgroups_path,
            sysctls=config.sysctls,
        )
        return spec.generate(container, platform)

    async def start(self, bundle: Path, config: SandboxConfig, platform: spec.Platform) -> State:
        """Write the sandbox's bundle and run it, detached."""
        write_bundle(bundle, self.bundle_spec(config, platform))
        return await self.runc.run_detached(self.id, bundle)

    async def namespaces(self, share_process_namespace: bool = False) -> dict[str, str]:
        """The paths the pod's containers join: {"user": "/proc/PID/ns/user", ...}."""
        state = await self.runc.state(self.id)
        if state.status not in ("running", "paused") or state.pid <= 0:
            raise SandboxNotRunning(f"sandbox {self.id} is {state.status}")
        kinds = self.kinds(share_process_namespace)
        return {kind: f"/proc/{state.pid}/ns/{PROC_NAMES[kind]}" for kind in kinds}

    async def container_namespaces(
        self, share_process_namespace: bool = False, host_users: bool = False
    ) -> Mapping[str, str | None]:
        """`spec.Container.namespaces` for one of the pod's containers: the sandbox's
        joined, a PID namespace of its own unless the pod shares one."""
        joined: dict[str, str | None] = dict(await self.namespaces(share_process_namespace))
        if host_users:
            joined.pop("user")
        joined.setdefault("pid", None)
        return joined

    async def stop(self) -> None:
        """Kill the sandbox's process (its namespaces go with it and the last
        container that holds them)."""
        await self.runc.kill(self.id, "KILL")

    async def remove(self) -> None:
        """Remove the sandbox, killing it first if it runs: its state and cgroup."""
        await self.runc.delete(self.id, force=True)
