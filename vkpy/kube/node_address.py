"""The address this host has towards the API server: the node's default InternalIP.

The API server dials a kubelet at its Node's InternalIP, so the right default is the
local address of the route to the server the API client actually uses (the
kubeconfig's current or chosen context, as the client loaded it), found without
sending a packet.
"""

from __future__ import annotations

import socket
from urllib.parse import urlparse

LOOPBACKS = ("localhost", "127.0.0.1", "::1")


def node_address_towards(server: str) -> str:
    """The local address used to reach `server` (a URL); loopback when unknown."""
    host = urlparse(server).hostname
    if not host or host in LOOPBACKS:
        return "::1" if host == "::1" else "127.0.0.1"
    try:
        family = socket.AF_INET6 if ":" in host else socket.AF_INET
        with socket.socket(family, socket.SOCK_DGRAM) as probe:
            probe.connect((host, 443))  # UDP: chooses the route, sends nothing
            return str(probe.getsockname()[0])
    except OSError:
        return "127.0.0.1"
