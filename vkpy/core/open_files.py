"""The agent's open-file limit, raised at start, and the share its kubelet API may hold.

Every kubelet API connection is a file descriptor, and so is every connection of the
agent's own API client pools, every log file and backend socket. Shells and init
systems often start processes with a soft limit of 1024; a node set of 1000 nodes,
with metrics-server holding one connection to each node's port, needs more than that
alone. Go's runtime (so the kubelet) raises its soft limit to the hard one at start;
vkpy does the same (`raise_soft_limit`). The kubelet API's connections together, over
all the ports of a node set, then stop short of the limit (`connection_budget`), so a
client opening connections on every port cannot leave the agent without descriptors
for its heartbeats (vkpy.api.listener: the process gate).
"""

from __future__ import annotations

import contextlib
import resource

CEILING = 1 << 20
"""Raised to at most this when the hard limit is unlimited."""


def soft_limit() -> int:
    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    return CEILING if soft == resource.RLIM_INFINITY else soft


def raise_soft_limit() -> int:
    """Raise the soft open-file limit to the hard one (up to CEILING); the soft limit
    after (unchanged when the system refuses)."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    target = CEILING if hard == resource.RLIM_INFINITY else hard
    if soft != resource.RLIM_INFINITY and soft < target:
        with contextlib.suppress(ValueError, OSError):
            resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
    return soft_limit()


def connection_budget(limit: int) -> int:
    """Kubelet API connections the whole process may hold under an open-file `limit`:
    all but a reserve (half the limit, at most 1024) for the agent's API client pools
    (up to 256 + 128 connections), logs and backends; at least 64."""
    return max(64, limit - min(1024, limit // 2))
