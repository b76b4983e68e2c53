"""A network namespace of our own for runs that need a node address that is not loopback.

The API server refuses to proxy to a loopback node address for some requests, and
tests of pod networks make interfaces and routes: none of that may touch the host's
network. So such runs happen in a network namespace they make themselves, holding
a veth pair with the node address (198.18.0.1/32, from the benchmarking range) and
loopback, both reachable only from inside. `setup_node_network` wires the namespace
the caller is in (conformance/run.py re-runs itself under `unshare --net`);
`PrivateNetwork` makes one and moves the calling thread into it until it is left
(the integration tests: processes started from that thread inherit it, so the
control plane, vkpy and kubectl all run inside). Needs root.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import signal
import subprocess
import time
from pathlib import Path
from types import TracebackType

NODE_IP = "198.18.0.1"
CLONE_NEWNET = 0x40000000


def sh(*argv: str) -> None:
    subprocess.run(argv, check=True)


def setup_node_network(node_ip: str = NODE_IP) -> None:
    """In a fresh network namespace: loopback up, a veth pair with the node IP, and
    unprivileged ports from 0 (containers run unprivileged; nginx listens on 80)."""
    sh("ip", "link", "set", "lo", "up")
    sh("ip", "link", "add", "vkpy0", "type", "veth", "peer", "name", "vkpy1")
    sh("ip", "addr", "add", f"{node_ip}/32", "dev", "vkpy0")
    sh("ip", "link", "set", "vkpy0", "up")
    sh("ip", "link", "set", "vkpy1", "up")
    Path("/proc/sys/net/ipv4/ip_unprivileged_port_start").write_text("0\n")
    Path("/proc/sys/net/ipv4/ping_group_range").write_text("0 2147483647\n")


def _setns(fd: int) -> None:
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.setns(fd, CLONE_NEWNET) != 0:
        error = ctypes.get_errno()
        raise OSError(error, f"setns: {os.strerror(error)}")


class PrivateNetwork:
    """`with PrivateNetwork():` the calling thread is in a new network namespace, set
    up by `setup_node_network`; on leaving, it is back in its own and the namespace
    is gone (with everything in it) once the processes started inside have ended."""

    def __init__(self, node_ip: str = NODE_IP) -> None:
        self.node_ip = node_ip
        self._holder: subprocess.Popen[bytes] | None = None
        self._home: int | None = None

    @property
    def path(self) -> str:
        """The namespace, as a file to enter (`nsenter --net=...`)."""
        assert self._holder is not None
        return f"/proc/{self._holder.pid}/ns/net"

    def __enter__(self) -> PrivateNetwork:
        self._holder = subprocess.Popen(
            ["unshare", "--net", "sleep", "infinity"], start_new_session=True
        )
        deadline = time.monotonic() + 10
        home = os.readlink("/proc/thread-self/ns/net")
        while os.readlink(f"/proc/{self._holder.pid}/ns/net") == home:
            if self._holder.poll() is not None or time.monotonic() > deadline:
                raise OSError("unshare --net did not make a network namespace")
            time.sleep(0.01)
        self._home = os.open("/proc/thread-self/ns/net", os.O_RDONLY | os.O_CLOEXEC)
        target = os.open(self.path, os.O_RDONLY | os.O_CLOEXEC)
        try:
            _setns(target)
        finally:
            os.close(target)
        try:
            setup_node_network(self.node_ip)
        except BaseException:
            self.__exit__(None, None, None)
            raise
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        if self._home is not None:
            _setns(self._home)
            os.close(self._home)
            self._home = None
        if self._holder is not None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self._holder.pid, signal.SIGKILL)
            self._holder.wait()
            self._holder = None
