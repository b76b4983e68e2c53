"""The record of a running dev cluster, and the ports it listens on.

`up` and `down` run in different processes (often a shell's `make cluster` and a
later `make cluster-down`), so what was started lives in `<dir>/state.json`: the
server URL, the binaries, the ports and each process with its identity. Ports are
chosen here too, preferring the previous run's so a restarted etcd keeps its
advertised peer URL.
"""

from __future__ import annotations

import contextlib
import json
import random
import socket
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from . import processes
from .components import LOOPBACK, Ports
from .processes import ProcessRecord

COMPONENTS = ("etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler")


@dataclass(frozen=True)
class ClusterState:
    """What `up` started, written to state.json so that `down` can stop it later."""

    server: str
    bin_dir: Path
    verify_kubelet_certs: bool
    ports: Ports
    processes: tuple[ProcessRecord, ...]

    def all_running(self) -> bool:
        names = {p.name for p in self.processes}
        return names == set(COMPONENTS) and all(map(processes.is_running, self.processes))

    def to_json(self) -> str:
        data = {
            "server": self.server,
            "bin_dir": str(self.bin_dir),
            "verify_kubelet_certs": self.verify_kubelet_certs,
            "ports": self.ports.to_json(),
            "processes": [p.to_json() for p in self.processes],
        }
        return json.dumps(data, indent=2) + "\n"

    @classmethod
    def from_json(cls, text: str) -> ClusterState:
        data = json.loads(text)
        return cls(
            server=str(data["server"]),
            bin_dir=Path(data["bin_dir"]),
            verify_kubelet_certs=bool(data["verify_kubelet_certs"]),
            ports=Ports.from_json(data["ports"]),
            processes=tuple(ProcessRecord.from_json(p) for p in data["processes"]),
        )


def free_ports(count: int, preferred: Sequence[int] = ()) -> list[int]:
    """`count` distinct free TCP ports on 127.0.0.1; `preferred` ones if all are free."""
    if len(preferred) == count and all(map(_port_is_free, preferred)):
        return list(preferred)
    with contextlib.ExitStack() as stack:
        sockets = [stack.enter_context(socket.socket()) for _ in range(count)]
        for s in sockets:
            s.bind((LOOPBACK, 0))
        return [s.getsockname()[1] for s in sockets]


def ports_are_free(first: int, count: int) -> bool:
    """Whether ports `first` .. `first + count - 1` can all be bound on 127.0.0.1 now
    (a node set's node i listens on --port + i)."""
    with contextlib.ExitStack() as stack:
        try:
            for port in range(first, first + count):
                stack.enter_context(socket.socket()).bind((LOOPBACK, port))
        except OSError:
            return False
    return True


def free_port_range(count: int, taken: Sequence[int] = ()) -> int:
    """The first of `count` consecutive ports free now, for a node set (its node i
    listens on --port + i; the tests and benchmarks start them), below the kernel's
    ephemeral range so connections made meanwhile do not take them; none of `taken`
    (the ends of ranges handed out already). Random, so concurrent runs rarely try
    the same range."""
    rng = random.Random()
    for _ in range(200):
        base = rng.randrange(20000, 32000 - count)
        if any(base <= t < base + count for t in taken):
            continue
        if ports_are_free(base, count):
            return base
    raise RuntimeError(f"no {count} consecutive free ports")


def _port_is_free(port: int) -> bool:
    with socket.socket() as s:
        # As Go's listeners do: connections in TIME_WAIT do not make the port busy.
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind((LOOPBACK, port))
        except OSError:
            return False
    return True
