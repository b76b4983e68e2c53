"""A pod's own UTS and IPC namespaces: its hostname, and System V IPC of its own.

When vkpy runs as root, each pod gets a small holder process (`unshare --uts --ipc`,
then `sleep`), started detached (`setsid -f`) so it outlives vkpy like the
supervisors do, with the pod's hostname set inside. Its pid and start time are kept
in the pod's `namespaces.json`; every process of the pod (the containers' main
processes, probes, hooks, `kubectl exec`) joins the holder's namespaces with
`setns` before it drops root (enter.py), so the pod's containers share one hostname
and one IPC namespace, and no other pod's. `hostNetwork` pods keep the host's UTS
namespace and `hostIPC` pods the host's IPC namespace, as with a kubelet. The
holder is killed when the pod is removed; a restarted vkpy adopts it by pid and
start time, and starts a new one if it is gone (containers already running keep
the namespaces they have).

With the pod filesystem (podroot.py) the holder also holds the pod's mount
namespace ("mnt"): it is then `podroot.py`, which builds the pod's root before it
reports its pid, and every pod process joins that namespace last (after the others,
whose files it opened first: /proc of the pod's view is not the host's). It holds
the pod's PID namespace too ("pid"), as its pid 1 (`unshare --pid --fork`), like
the pause container of a kubelet's pod with `shareProcessNamespace`.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from vkpy.core.objects import KubeObject
from vkpy.providers.process import proc
from vkpy.providers.process.layout import read_json, write_json

RECORD = "namespaces.json"
HOLDER_PID = "namespaces.pid"
ERROR_FILE = "namespaces.error"
PLAN = "sandbox.json"


@dataclass(frozen=True)
class Holder:
    pid: int
    start: int
    kinds: tuple[str, ...]
    """Which namespaces it holds: "uts", "ipc", "net" (podnet.py)."""

    def alive(self) -> bool:
        return proc.is_same_process(self.pid, self.start)

    def paths(self) -> tuple[str, ...]:
        """The namespaces to join with setns (the PID namespace is apart: pid_path)."""
        return tuple(f"/proc/{self.pid}/ns/{kind}" for kind in self.kinds if kind != "pid")

    def pid_path(self) -> str | None:
        """The pod's PID namespace, if it has one."""
        return f"/proc/{self.pid}/ns/pid" if "pid" in self.kinds else None


def wanted(spec: KubeObject, network: bool = False, filesystem: bool = False) -> tuple[str, ...]:
    """The namespaces a pod gets of its own (none it asked to share with the host);
    `network`: the node gives pods a network of their own (podnet.py); `filesystem`:
    a mount namespace (podroot.py) and a PID namespace."""
    kinds = ["mnt"] if filesystem else []
    if filesystem and not spec.get("hostPID"):
        kinds.append("pid")
    if not spec.get("hostNetwork"):
        kinds.append("uts")
        if network:
            kinds.append("net")
    if not spec.get("hostIPC"):
        kinds.append("ipc")
    return tuple(kinds)


CLUSTER_DOMAIN = "cluster.local"
MAX_HOSTNAME = 63


def _truncated(hostname: str) -> str:
    """At most 63 characters, not ending in `-` or `.` (as the kubelet cuts it)."""
    if len(hostname) <= MAX_HOSTNAME:
        return hostname
    return hostname[:MAX_HOSTNAME].rstrip("-.") or hostname[:MAX_HOSTNAME]


def host_and_domain(spec: KubeObject, name: str, namespace: str) -> tuple[str, str]:
    """The pod's hostname and its domain ("" for none), as the kubelet derives them:
    `hostnameOverride` is the whole hostname (no domain); otherwise `hostname` or the
    pod's name, in `<subdomain>.<namespace>.svc.cluster.local` with a `subdomain`."""
    override = spec.get("hostnameOverride")
    if override:
        return _truncated(str(override)), ""
    host = _truncated(str(spec.get("hostname") or name))
    subdomain = spec.get("subdomain")
    domain = f"{subdomain}.{namespace}.svc.{CLUSTER_DOMAIN}" if subdomain else ""
    return host, domain


def hostname(spec: KubeObject, name: str, namespace: str) -> str:
    """The pod's kernel hostname: its FQDN with `setHostnameAsFQDN` and a domain."""
    host, domain = host_and_domain(spec, name, namespace)
    if domain and spec.get("setHostnameAsFQDN"):
        return f"{host}.{domain}"[:64]
    return host


def load(pod_dir: Path) -> Holder | None:
    raw = read_json(pod_dir / RECORD)
    if not isinstance(raw, dict):
        return None
    return Holder(int(raw["pid"]), int(raw["start"]), tuple(str(k) for k in raw["kinds"]))


def start(
    pod_dir: Path,
    kinds: tuple[str, ...],
    host: str,
    timeout: float = 10.0,
    plan: dict[str, Any] | None = None,
    python: str = sys.executable,
) -> Holder:
    """Start the pod's holder (detached) and record it; OSError if it cannot be.
    With "mnt" in `kinds`, `plan` is podroot.py's plan (sandbox.plan), written here
    with the holder's own fields."""
    pid_file = pod_dir / HOLDER_PID
    error_file = pod_dir / ERROR_FILE
    for stale in (pid_file, error_file):
        with contextlib.suppress(FileNotFoundError):
            stale.unlink()
    flags = [f"--{'mount' if kind == 'mnt' else kind}" for kind in kinds]
    if "pid" in kinds:
        flags.append("--fork")  # the holder is pid 1 of the pod's PID namespace
    if "mnt" in kinds and plan is not None:
        plan_file = pod_dir / PLAN
        write_json(
            plan_file,
            {
                **plan,
                "hostname": host if "uts" in kinds else "",
                "pid_file": HOLDER_PID,
                "error_file": ERROR_FILE,
                "proc": "pid" in kinds,
            },
        )
        command = [python, "-I", "-S", str(Path(__file__).with_name("podroot.py")), str(plan_file)]
    else:
        set_name = 'hostname "$2" && ' if "uts" in kinds else ""
        script = f'echo $$ > "$1" && {set_name}exec sleep infinity'
        command = ["sh", "-c", script, "holder", str(pid_file), host]
    try:
        subprocess.run(
            ["setsid", "-f", "unshare", *flags, *command],
            # No pipe: the holder would keep it open for ever.
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            check=True,
            timeout=timeout,
        )
    except (subprocess.CalledProcessError, FileNotFoundError) as error:
        raise OSError(f"cannot make the pod's namespaces (unshare, setsid): {error}") from None
    except subprocess.TimeoutExpired:
        raise OSError("cannot make the pod's namespaces: unshare did not answer") from None
    deadline = time.monotonic() + timeout
    while True:
        text = pid_file.read_text().strip() if pid_file.exists() else ""
        if text.isdigit():
            pid = int(text)
            ticks = proc.start_ticks(pid)
            if ticks is not None:
                holder = Holder(pid, ticks, kinds)
                write_json(pod_dir / RECORD, {"pid": pid, "start": ticks, "kinds": list(kinds)})
                return holder
        if error_file.exists():
            raise OSError(f"cannot build the pod's filesystem: {error_file.read_text().strip()}")
        if time.monotonic() > deadline:
            raise OSError("the pod's namespace holder did not start")
        time.sleep(0.01)


def stop(pod_dir: Path) -> None:
    """Kill the pod's holder, if it is still the process that was recorded."""
    holder = load(pod_dir)
    if holder is not None and holder.alive():
        found = proc.stat(holder.pid)
        with contextlib.suppress(ProcessLookupError):
            os.kill(holder.pid, signal.SIGKILL)
        # With a PID namespace the holder is `unshare --fork`'s child; that parent,
        # the leader of the holder's session, would stay until it reaped it.
        if found is not None and found.session not in (0, holder.pid):
            _kill_unshare(found.session)


def _kill_unshare(pid: int) -> None:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as handle:
            program = handle.read().split(b"\0", 1)[0]
    except OSError:
        return
    if os.path.basename(program) == b"unshare":
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
