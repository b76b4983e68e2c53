"""Where port-forward may connect: only to a socket a process of the pod listens on.

Pods of the process backend share the host's network, so "port 8080 of the pod" is
8080 on the host, where anything may listen: a loopback-only admin service, the API
server, another pod. A kubelet connects inside the pod's network namespace and so
reaches only the pod; here the same promise is kept by looking first: the listening
TCP sockets of the host (`/proc/net/tcp`, `/proc/net/tcp6`) are matched by inode
against the sockets the pod's processes hold open (`/proc/<pid>/fd`). Only a socket
of the pod on that port is connected to, at the address it listens on (loopback for
a wildcard address); otherwise port-forward is refused, whoever else listens there.
"""

from __future__ import annotations

import ipaddress
import os
from collections.abc import Iterable

LISTEN = "0A"


def socket_inodes(pids: Iterable[int]) -> set[int]:
    """Inodes of the sockets the processes hold open."""
    inodes: set[int] = set()
    for pid in pids:
        directory = f"/proc/{pid}/fd"
        try:
            names = os.listdir(directory)
        except OSError:
            continue
        for name in names:
            try:
                target = os.readlink(f"{directory}/{name}")
            except OSError:
                continue
            if target.startswith("socket:[") and target.endswith("]"):
                inodes.add(int(target[8:-1]))
    return inodes


def _address(hex_address: str) -> str:
    """A /proc/net/tcp{,6} address (hex, in the host's byte order by 32-bit word)."""
    raw = bytes.fromhex(hex_address)
    words = b"".join(raw[i : i + 4][::-1] for i in range(0, len(raw), 4))
    if len(words) == 4:
        return ".".join(str(b) for b in words)
    return str(ipaddress.IPv6Address(words))


def listeners(table: str) -> list[tuple[str, int, int]]:
    """(address, port, inode) of the listening sockets in one /proc/net table's text."""
    found = []
    for line in table.splitlines()[1:]:
        fields = line.split()
        if len(fields) < 10 or fields[3] != LISTEN:
            continue
        address, _, port = fields[1].partition(":")
        found.append((_address(address), int(port, 16), int(fields[9])))
    return found


def _connect_address(address: str) -> str:
    if address == "0.0.0.0":
        return "127.0.0.1"
    if address in ("::", "::ffff:0.0.0.0"):
        return "::1"
    if address.startswith("::ffff:"):
        return address.removeprefix("::ffff:")
    return address


def pod_listener(pids: Iterable[int], port: int) -> str | None:
    """The address to connect to for `port` of the pod whose processes are `pids`, or
    None when none of them listens there."""
    mine = socket_inodes(pids)
    if not mine:
        return None
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            with open(table) as handle:
                text = handle.read()
        except OSError:
            continue
        for address, listening_port, inode in listeners(text):
            if listening_port == port and inode in mine:
                return _connect_address(address)
    return None
