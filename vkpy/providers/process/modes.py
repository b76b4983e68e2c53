"""Which runtime and network a process node runs in when its settings do not say.

A kubelet user expects `image:` to mean an image, so when vkpy runs as root the
process backend runs images through runc (`runtime: oci`) with a network namespace
and an address per pod (`network: pod`). Without root neither is possible (user
namespaces, cgroups, veth pairs), and the node keeps what it always did: host
programs (the stand-ins) on the host's network. Host programs as root stay available
as the explicit per-node choice `runtime: host`.

Nothing falls back silently: a root node whose settings leave the runtime to the
default, on a host without runc, skopeo or umoci, stops at start with what to do
(`missing_tools`), rather than running stand-ins where images were meant.

A node in `network: pod` needs a pod CIDR. The Node's `spec.podCIDR` is used once
the control plane assigns one; until then (and on clusters that never do) the node
takes a /24 of its own from DEFAULT_POD_CIDRS, chosen by its name and pod directory,
so two nodes on one host (the dev cluster's, or test runs side by side) do not share
addresses.
"""

from __future__ import annotations

import hashlib
import ipaddress
import shutil
from collections.abc import Sequence

DEFAULT_POD_CIDRS = ipaddress.IPv4Network("10.160.0.0/11")
"""Where a node's default pod CIDR (a /24) comes from: 8,192 of them."""

OCI_TOOLS = ("skopeo", "umoci")
"""What `runtime: oci` runs besides the OCI runtime itself: skopeo pulls (the registry
protocol), umoci unpacks (layers and whiteouts) (vkpy/oci/images)."""


def default_runtime(euid: int) -> str:
    """`oci` when vkpy is root, else `host`."""
    return "oci" if euid == 0 else "host"


def default_network(runtime: str, euid: int) -> str:
    """`pod` for an `oci` node run by root, else `host`: a node that chose host
    programs keeps the host's network unless it asks for `network: pod`."""
    return "pod" if euid == 0 and runtime == "oci" else "host"


def default_pod_cidr(node_name: str, pods_dir: str) -> str:
    """A /24 of DEFAULT_POD_CIDRS for this node: the same every time for the same
    node name and pod directory, most likely another for any other node."""
    digest = hashlib.sha256(f"{node_name}\0{pods_dir}".encode()).digest()
    count = 2 ** (24 - DEFAULT_POD_CIDRS.prefixlen)
    index = int.from_bytes(digest[:4], "big") % count
    first = int(DEFAULT_POD_CIDRS.network_address) + index * 256
    return f"{ipaddress.IPv4Address(first)}/24"


def missing_tools(runc: str, path: str | None = None) -> list[str]:
    """The programs `runtime: oci` needs that this host lacks (`path`: PATH to look in)."""
    wanted: Sequence[str] = (runc, *OCI_TOOLS)
    return [name for name in wanted if shutil.which(name, path=path) is None]


def missing_tools_message(missing: Sequence[str], defaulted: bool) -> str:
    """Why an `oci` node cannot start, and the two ways out."""
    why = "runtime: oci (the default when vkpy runs as root)" if defaulted else "runtime: oci"
    return (
        f"{why} runs images through runc, pulled with skopeo and unpacked with umoci, "
        f"but this host has no {', '.join(missing)}. Install them with `make system-deps` "
        "(Debian packages runc, skopeo, umoci, as root), or set `runtime: host` in the "
        "--provider-config file to run host programs (the stand-ins) instead of images"
    )
