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
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

from vkpy.objects import KubeObject
from vkpy.providers.process import proc
from vkpy.providers.process.layout import read_json, write_json

RECORD = "namespaces.json"
HOLDER_PID = "namespaces.pid"


@dataclass(frozen=True)
class Holder:
    pid: int
    start: int
    kinds: tuple[str, ...]
    """Which namespaces it holds: "uts", "ipc", "net" (podnet.py)."""

    def alive(self) -> bool:
        return proc.is_same_process(self.pid, self.start)

    def paths(self) -> tuple[str, ...]:
        return tuple(f"/proc/{self.pid}/ns/{kind}" for kind in self.kinds)


def wanted(spec: KubeObject, network: bool = False) -> tuple[str, ...]:
    """The namespaces a pod gets of its own (none it asked to share with the host);
    `network`: the node gives pods a network of their own (podnet.py)."""
    kinds = []
    if not spec.get("hostNetwork"):
        kinds.append("uts")
        if network:
            kinds.append("net")
    if not spec.get("hostIPC"):
        kinds.append("ipc")
    return tuple(kinds)


def hostname(spec: KubeObject, name: str) -> str:
    return str(spec.get("hostname") or name)[:63]


def load(pod_dir: Path) -> Holder | None:
    raw = read_json(pod_dir / RECORD)
    if not isinstance(raw, dict):
        return None
    return Holder(int(raw["pid"]), int(raw["start"]), tuple(str(k) for k in raw["kinds"]))


def start(pod_dir: Path, kinds: tuple[str, ...], host: str, timeout: float = 10.0) -> Holder:
    """Start the pod's holder (detached) and record it; OSError if it cannot be."""
    pid_file = pod_dir / HOLDER_PID
    with contextlib.suppress(FileNotFoundError):
        pid_file.unlink()
    flags = [f"--{kind}" for kind in kinds]
    set_name = 'hostname "$2" && ' if "uts" in kinds else ""
    script = f'echo $$ > "$1" && {set_name}exec sleep infinity'
    try:
        subprocess.run(
            ["setsid", "-f", "unshare", *flags, "sh", "-c", script, "holder", str(pid_file), host],
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
        if time.monotonic() > deadline:
            raise OSError("the pod's namespace holder did not start")
        time.sleep(0.01)


def stop(pod_dir: Path) -> None:
    """Kill the pod's holder, if it is still the process that was recorded."""
    holder = load(pod_dir)
    if holder is not None and holder.alive():
        with contextlib.suppress(ProcessLookupError):
            os.kill(holder.pid, signal.SIGKILL)
