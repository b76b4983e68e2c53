"""A pod's own network (`network: pod`): its namespace wired to the node by a veth pair.

The pod's network namespace is held by its namespace holder (namespaces.py), like
its UTS and IPC namespaces, and every process of the pod joins it. Here it gets
its wiring, point to point as in a CNI "ptp" setup (no bridge, nothing shared
between pods): a veth pair whose pod end is `eth0` in the pod's namespace with the
pod's address (/32), loopback up, a link route to the gateway and the default route
through it, and, as container runtimes do, ports below 1024 and ping open to the
pod's unprivileged users; the node end (`vkp` + the start of the pod's uid) carries the gateway
address (the first of the pod CIDR, the same on every pair) and a /32 route to the
pod. So the node reaches each pod at its address, two pods can listen on one port,
and 127.0.0.1 in a pod is the pod's own. Traffic between pods, or from a pod to
beyond the node, is routed only if the host forwards IPv4 (vkpy leaves that
setting alone). The node end carries an alias `vkpy:<node>:<pod uid>`, so a vkpy
starting again finds the pairs of its own pods that are gone and removes them, and
never another node's. Everything is done with `ip` (iproute2), in one batch per side
(the pod's side, with its sysctls, in one `nsenter`).

`connect_in` opens a TCP connection from inside a pod's network namespace (for
port-forward, as a kubelet connects to localhost in the pod's sandbox): a
short-lived thread joins the namespace with `setns`, connects, and ends, so no
thread of vkpy stays in it.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import threading

from vkpy.providers.process import mountcalls
from vkpy.providers.process.addresses import PodAddress

ALIAS_PREFIX = "vkpy:"
POD_LINK = "eth0"
POD_SYSCTLS = (
    ("net/ipv4/ip_unprivileged_port_start", "0"),
    ("net/ipv4/ping_group_range", "0 2147483647"),
)
"""What a container runtime sets in every pod's network namespace (containerd's
defaults): ports below 1024 and ping sockets for any user, so an unprivileged pod
can serve on port 80 as it does in a container. A new namespace starts at 1024."""


def link_name(pod_uid: str) -> str:
    """The node end of the pod's pair: 15 characters at most (IFNAMSIZ)."""
    return "vkp" + pod_uid.replace("-", "")[:12]


def alias(node: str, pod_uid: str) -> str:
    return f"{ALIAS_PREFIX}{node}:{pod_uid}"


def _ip(args: list[str], batch: str = "", netns_pid: int | None = None) -> None:
    """`ip args` (stdin: `batch`); with `netns_pid`, in that process's network
    namespace, after the settings of POD_SYSCTLS (one process for the pod's side)."""
    argv = ["ip", *args]
    if netns_pid is not None:
        script = "".join(f"echo '{value}' > /proc/sys/{key}\n" for key, value in POD_SYSCTLS)
        argv = ["nsenter", f"--net=/proc/{netns_pid}/ns/net", "--", "sh", "-ec",
                script + 'exec "$@"', "sh", *argv]  # fmt: skip
    try:
        result = subprocess.run(
            argv, input=batch or None, capture_output=True, text=True, timeout=30, check=False
        )
    except (FileNotFoundError, subprocess.TimeoutExpired) as error:
        raise OSError(f"cannot wire the pod's network ({' '.join(argv[:3])}): {error}") from None
    if result.returncode != 0:
        raise OSError(f"cannot wire the pod's network: {result.stderr.strip() or argv}")


def link_exists(link: str) -> bool:
    """Whether vkpy's network namespace has the link (asked by netlink: /sys/class/net
    shows the namespace sysfs was mounted in, which need not be vkpy's)."""
    try:
        result = subprocess.run(
            ["ip", "link", "show", "dev", link], capture_output=True, timeout=30, check=False
        )
    except (FileNotFoundError, subprocess.TimeoutExpired) as error:
        raise OSError(f"cannot look up the link {link}: {error}") from None
    return result.returncode == 0


def connect(holder_pid: int, record: PodAddress, node: str, pod_uid: str) -> None:
    """Wire the namespace of the holder `holder_pid` to the node (see the docstring)."""
    disconnect(record.link)  # a pair left from a holder that is gone
    gw = record.gateway
    _ip(["link", "add", record.link, "type", "veth", "peer", "name", POD_LINK,
         "netns", str(holder_pid)])  # fmt: skip
    try:
        _ip(
            ["-batch", "-"],
            "\n".join(
                [
                    f"link set {record.link} alias {alias(node, pod_uid)}",
                    f"addr add {gw}/32 dev {record.link}",
                    f"link set {record.link} up",
                    f"route replace {record.address}/32 dev {record.link} src {gw}",
                ]
            )
            + "\n",
        )
        _ip(
            ["-batch", "-"],
            "\n".join(
                [
                    "link set lo up",
                    f"addr add {record.address}/32 dev {POD_LINK}",
                    f"link set {POD_LINK} up",
                    f"route add {gw}/32 dev {POD_LINK} scope link",
                    f"route add default via {gw} dev {POD_LINK}",
                ]
            )
            + "\n",
            netns_pid=holder_pid,
        )
    except OSError:
        disconnect(record.link)
        raise


def disconnect(link: str) -> None:
    """Remove the pair (its address and route go with it); nothing if it is gone."""
    if link and link_exists(link):
        try:
            _ip(["link", "del", link])
        except OSError:
            if link_exists(link):
                raise


def own_links(node: str) -> dict[str, str]:
    """{pod uid: node-end link} of the pairs this node made, as the kernel has them."""
    prefix = f"{ALIAS_PREFIX}{node}:"
    found = {}
    for link in _ip_json("link", "show", "type", "veth"):
        text = str(link.get("ifalias") or "")
        if text.startswith(prefix):
            found[text.removeprefix(prefix)] = str(link.get("ifname"))
    return found


def _ip_json(*args: str) -> list[dict[str, object]]:
    result = subprocess.run(
        ["ip", "-j", *args], capture_output=True, text=True, timeout=30, check=False
    )
    if result.returncode != 0:
        return []
    try:
        found = json.loads(result.stdout or "[]")
    except ValueError:
        return []
    return [item for item in found if isinstance(item, dict)]


def node_addresses() -> list[tuple[str, str]]:
    """(address, prefix length) of the IPv4 addresses of vkpy's network namespace, on
    links no vkpy made (the gateways on the pairs are left out)."""
    made = {
        str(link.get("ifname"))
        for link in _ip_json("link", "show")
        if str(link.get("ifalias") or "").startswith(ALIAS_PREFIX)
    }
    found = []
    for link in _ip_json("-4", "addr"):
        if str(link.get("ifname")) in made:
            continue
        infos = link.get("addr_info")
        for info in infos if isinstance(infos, list) else []:
            found.append((str(info.get("local")), str(info.get("prefixlen"))))
    return found


def connect_in(holder_pid: int, port: int, timeout: float = 10.0) -> socket.socket:
    """A TCP connection to 127.0.0.1:`port` inside the holder's network namespace."""
    outcome: list[socket.socket | BaseException] = []

    def run() -> None:
        try:
            fd = os.open(f"/proc/{holder_pid}/ns/net", os.O_RDONLY | os.O_CLOEXEC)
            try:
                mountcalls.setns(fd, mountcalls.CLONE_NEWNET)
            finally:
                os.close(fd)
            # This thread ends right after: nothing else of vkpy runs in the namespace.
            sock = socket.create_connection(("127.0.0.1", port), timeout=timeout)
            sock.settimeout(None)
            outcome.append(sock)
        except BaseException as error:  # handed to the caller
            outcome.append(error)

    thread = threading.Thread(target=run, name=f"netns-connect-{holder_pid}", daemon=True)
    thread.start()
    thread.join()
    result = outcome[0] if outcome else OSError("the connecting thread ended without a result")
    if isinstance(result, BaseException):
        raise result
    return result
