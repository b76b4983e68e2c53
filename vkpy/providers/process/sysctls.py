"""A pod's sysctls (`securityContext.sysctls`), set in the pod's own namespaces.

The node admits only sysctls that the kernel keeps per namespace (the safe ones and
those the node allows, node/podspec/admission.py); a kubelet's container runtime then writes
them in the pod sandbox's namespaces. Here the pod's namespace holder
(namespaces.py) holds those namespaces: `kernel.shm*`, `kernel.msg*`, `kernel.sem`
and `fs.mqueue.*` belong to its IPC namespace, `net.*` to its network namespace.
They are written from inside the holder's namespaces (`nsenter`), once, when the
holder is made, so every container of the pod sees them. A sysctl of a namespace
the pod would share with the node (`hostIPC`, `network: host`, no namespaces at all)
is refused: writing it would change the host.
"""

from __future__ import annotations

import re
import subprocess

from vkpy.core.objects import KubeObject

_IPC_PREFIXES = ("kernel.shm", "kernel.msg", "fs.mqueue.")
_WRITE = 'while [ "$#" -gt 0 ]; do printf "%s\\n" "$2" > "/proc/sys/$1"; shift 2; done'


def dotted(name: str) -> str:
    """The name with dots as separators: when its first separator is a slash, slashes
    and dots swap (`kernel/shm_rmid_forced` -> `kernel.shm_rmid_forced`)."""
    first = re.search(r"[./]", name)
    if first is None or first.group() == ".":
        return name
    return name.translate(str.maketrans("./", "/."))


def proc_path(name: str) -> str:
    """Where the sysctl is under /proc/sys (`net.ipv4.conf.eth0/100.rp_filter` ->
    `net/ipv4/conf/eth0.100/rp_filter`)."""
    return dotted(name).translate(str.maketrans("./", "/."))


def namespace_of(name: str) -> str | None:
    """The holder's namespace kind ("ipc" or "net") the sysctl belongs to, if any."""
    name = dotted(name)
    if name.startswith("net."):
        return "net"
    if name.startswith(_IPC_PREFIXES) or name == "kernel.sem":
        return "ipc"
    return None


def requested(spec: KubeObject) -> list[tuple[str, str]]:
    """The pod's sysctls, (name, value) in the order given."""
    found = (spec.get("securityContext") or {}).get("sysctls") or []
    return [(str(s.get("name", "")), str(s.get("value", ""))) for s in found]


def refusal(spec: KubeObject, kinds: tuple[str, ...]) -> str | None:
    """Why the pod's sysctls cannot be set in namespaces of its own (`kinds`: those
    its holder will hold), or None."""
    for name, _ in requested(spec):
        parts = proc_path(name).split("/")
        if any(part in ("", ".", "..") for part in parts):
            return f'forbidden sysctl: "{name}" is not a sysctl name'
        kind = namespace_of(name)
        if kind is None:
            return f'forbidden sysctl: "{dotted(name)}" is not known to be namespaced'
        if kind not in kinds:
            return (
                f'forbidden sysctl: "{dotted(name)}" belongs to the {kind} namespace, '
                "which this pod shares with the node"
            )
    return None


def apply(holder_pid: int, spec: KubeObject) -> None:
    """Write the pod's sysctls inside the namespaces of its holder `holder_pid`;
    OSError if one cannot be written (refusal() was asked before)."""
    wanted = requested(spec)
    if not wanted:
        return
    pairs = [part for name, value in wanted for part in (proc_path(name), value)]
    argv = ["nsenter", f"--ipc=/proc/{holder_pid}/ns/ipc", f"--net=/proc/{holder_pid}/ns/net",
            "--", "sh", "-ec", _WRITE, "sh", *pairs]  # fmt: skip
    try:
        result = subprocess.run(argv, capture_output=True, text=True, timeout=30, check=False)
    except (FileNotFoundError, subprocess.TimeoutExpired) as error:
        raise OSError(f"cannot set the pod's sysctls: {error}") from None
    if result.returncode != 0:
        raise OSError(f"cannot set the pod's sysctls: {result.stderr.strip()}")
