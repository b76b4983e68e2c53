"""A pod for the runtime tests: a sandbox and its containers, run by the real runc.

`RuncPod` builds a busybox root filesystem owned by the pod's host id range, starts
the pod sandbox (new user, network, IPC and UTS namespaces) and runs containers that
join it, each with its output in a file of its own (given to runc at create, so no
test code is in the pipe). Its `cleanup` deletes every container of its runc state
directory and the cgroups under its parent, so no test leaves anything running.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import platform
import secrets
import shutil
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from tests.integration.oci import busybox_rootfs
from vkpy.oci.runtime import runc, sandbox, seccomp, spec

CGROUP_ROOT = Path("/sys/fs/cgroup")
PATH_ENV = {"PATH": "/bin", "HOME": "/root"}


def host_platform() -> spec.Platform:
    return spec.Platform(
        machine=platform.machine(), kernel=seccomp.kernel_version(platform.release())
    )


def runtime_default() -> spec.Seccomp:
    return spec.Seccomp("RuntimeDefault", seccomp.load(seccomp.RUNTIME_DEFAULT))


class RuncPod:
    def __init__(self, work: Path) -> None:
        self.work = work
        self.id_base = 0x10000 * (20 + secrets.randbelow(200))
        self.rootfs = busybox_rootfs.build(work / "rootfs", self.id_base)
        self.runc = runc.Runc(work / "runc")
        self.platform = host_platform()
        self.cgroup_parent = f"vkpy-test-{secrets.token_hex(4)}"
        self.sandbox = sandbox.PodSandbox(self.runc, f"{self.cgroup_parent}-sandbox")
        self.default_security = spec.Security(seccomp=runtime_default())

    @property
    def mapping(self) -> tuple[spec.IdMapping, ...]:
        return spec.pod_mapping(self.id_base)

    async def start_sandbox(self, hostname: str = "pod-a") -> None:
        config = sandbox.SandboxConfig(
            rootfs=str(self.rootfs),
            args=["/bin/sleep", "2147483647"],
            hostname=hostname,
            host_id_base=self.id_base,
            cgroups_path=f"/{self.cgroup_parent}/sandbox",
            security=sandbox.sandbox_security(runtime_default()),
        )
        await self.sandbox.start(self.work / "bundles" / "sandbox", config, self.platform)

    def container(
        self, args: list[str], namespaces: dict[str, str | None], **fields: Any
    ) -> spec.Container:
        process = fields.pop("process", {})
        return spec.Container(
            process=spec.Process(args=args, env=PATH_ENV, **process),
            rootfs=fields.pop("rootfs", str(self.rootfs)),
            namespaces=namespaces,
            uid_mappings=self.mapping,
            gid_mappings=self.mapping,
            security=fields.pop("security", self.default_security),
            **fields,
        )

    async def run(self, name: str, script: str, **fields: Any) -> tuple[runc.State, Path]:
        """Run `sh -c script` in the pod (joining its sandbox); its state and log."""
        namespaces = fields.pop("namespaces", None)
        if namespaces is None:
            namespaces = dict(await self.sandbox.container_namespaces())
        container = self.container(
            ["/bin/sh", "-c", script],
            namespaces,
            cgroups_path=f"/{self.cgroup_parent}/{name}",
            **fields,
        )
        bundle = self.work / "bundles" / name
        runc.write_bundle(bundle, spec.generate(container, self.platform))
        log = self.work / f"{name}.log"
        with open(log, "ab") as out:
            state = await self.runc.run_detached(name, bundle, stdout=out, stderr=out)
        return state, log

    async def cleanup(self) -> None:
        with contextlib.suppress(runc.RuncError, FileNotFoundError):
            for state in await self.runc.containers():
                with contextlib.suppress(runc.RuncError):
                    await self.runc.delete(state.id, force=True)
        for hierarchy in [CGROUP_ROOT, *CGROUP_ROOT.iterdir()]:
            parent = hierarchy / self.cgroup_parent
            if parent.is_dir():
                for child in sorted(parent.glob("**/"), key=lambda p: -len(p.parts)):
                    with contextlib.suppress(OSError):
                        child.rmdir()


def cgroup_dirs(pid: int) -> dict[str, Path]:
    """The cgroup directories of `pid` by hierarchy ("memory", "cpu", ...; "" for the
    unified one), as /proc/PID/cgroup gives them."""
    out = {}
    for line in Path(f"/proc/{pid}/cgroup").read_text().splitlines():
        _, controllers, path = line.split(":", 2)
        name = controllers.removeprefix("name=").split(",")[0]
        if name == "":
            base = CGROUP_ROOT / "unified" if (CGROUP_ROOT / "unified").is_dir() else CGROUP_ROOT
        else:
            base = CGROUP_ROOT / name
        directory = base / path.lstrip("/")
        if directory.is_dir():
            out[name] = directory
    return out


def status_ids(pid: int) -> tuple[list[int], list[int]]:
    """(Uid, Gid) of /proc/PID/status: real, effective, saved, filesystem."""
    fields = dict(
        line.split(":", 1) for line in Path(f"/proc/{pid}/status").read_text().splitlines()
    )
    return [int(x) for x in fields["Uid"].split()], [int(x) for x in fields["Gid"].split()]


async def wait_for(check: Callable[[], bool], timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            raise AssertionError("timed out waiting")
        await asyncio.sleep(0.05)


def log_has(log: Path, text: str) -> Callable[[], bool]:
    return lambda: log.exists() and text in log.read_text()


def pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def remove_work(work: Path) -> None:
    shutil.rmtree(work, ignore_errors=True)
