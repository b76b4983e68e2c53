"""A node set: many virtual nodes served by one process, from `--nodes N` or a file.

kwok's niche, testing schedulers, autoscalers and controllers against thousands of
nodes, needs one process to register many nodes, each possibly different. A node set
file lists groups; each group is a count and a name pattern, or a list of names, with
its own labels, taints, capacity and backend settings:

    nodes:
      - count: 900
        name: "sim-{index:04d}"
        labels: {topology.kubernetes.io/zone: a}
        capacity: {cpu: "32", memory: 128Gi, pods: "110"}
      - names: [big-0, big-1]
        taints: ["dedicated=big:NoSchedule"]
        provider_config: {start_seconds: 2}

Each member becomes the settings of one node (a copy of the command line's, with the
group's changes), so everything below sees ordinary per-node settings. Node i of the
set advertises kubelet port `--port` + i, all served by the process's one listener:
the API server asks a kubelet for /stats/summary or /pods without naming the node,
so the port it dials is what says which node it means.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Mapping
from dataclasses import dataclass, replace

from vkpy.node.settings import NodeSettings, PodControllerSettings, Taint

DEFAULT_PATTERN = "{prefix}-{index}"

SET_LABEL = "vkpy.io/node-set"
"""On every Node of a set and every Lease of a shared set (the nodes' and the
replicas'): the set's name, so `kubectl get nodes -l` and an uninstall find them all."""

NODE_SET_STATUS_INTERVAL = 300.0
"""The kubelet's nodeStatusReportFrequency: with Leases as the heartbeat, a node's
status is written when it changes and every 5 minutes; a node set does the same."""

_GROUP_KEYS = frozenset(
    {"count", "name", "names", "labels", "taints", "capacity", "provider_config", "start"}
)


def dns_label(text: str, limit: int) -> str:
    """`text` as lowercase letters, digits and dashes, at most `limit` long (a hash
    keeps names that had to be cut apart)."""
    clean = re.sub(r"[^a-z0-9-]+", "-", text.lower()).strip("-") or "x"
    if len(clean) <= limit:
        return clean
    digest = hashlib.blake2b(text.encode(), digest_size=4).hexdigest()
    return f"{clean[: limit - 9].rstrip('-')}-{digest}"


def node_set_name(prefix: str) -> str:
    """The set's name in labels: from --node-name (the names' prefix), the same for
    every replica of the set."""
    return dns_label(prefix, 63)


API_CONNECTIONS_FLOOR = 6
"""API requests in flight at once for one node (and a small set), first come, first
served (`KubeClient`'s gate; HTTP/1.1 carries one request per connection at a time).
It is what a node's pod work may take of the API server while others write to it: on a
2-core API server, a burst of 1000 pods created by 32 clients (issue 30) took the
clients' creates 1.43 times as long as with kwok when vkpy had 16 status patches in flight,
and 1.05 times with 4, kwok's own pod parallelism. Once Events waited for the node to be
idle (`ElasticGate`) 4 left pods Running at 0.96 times kwok's rate, p99 1.08 times, with
the clients' creates at 0.96 times; 6 gave 1.14, 0.78 and 1.00 times (four rounds, each
pair vkpy's). A status patch takes the API server 10-50 ms, so 6 in flight carry
120-600 a second, more than the 50 a second a kubelet's client is allowed. While a
backlog lasts the gate lets more out (`api_connections_behind`, `ElasticGate`)."""


def api_connections(nodes: int) -> int:
    """Connections in the one API pool: 6 for one node, one per 4 nodes of a set
    (up to 256): 1000 nodes renew 100 Leases a second (through the heartbeat pool) and
    their pods' work comes in bursts across many nodes at once."""
    return max(API_CONNECTIONS_FLOOR, min(256, nodes // 4))


def api_connections_behind(nodes: int) -> int:
    """Requests in flight at once while the nodes' API work has been waiting for turns
    for a while (`ElasticGate`'s ceiling): 8 times `api_connections`, up to 256, so
    that one node behind 100 pods a second is not held to 6 requests at once."""
    return min(256, 8 * api_connections(nodes))


class NodeSetError(ValueError):
    """The node set is invalid; the message says where and why."""


@dataclass(frozen=True)
class Member:
    """One node of the set: its settings and its backend's."""

    node: NodeSettings
    pods: PodControllerSettings
    provider_config: Mapping[str, object]


def _str_map(value: object, where: str) -> dict[str, str]:
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise NodeSetError(f"{where} must map names to values")
    return {str(k): str(v) for k, v in value.items()}


def _names(group: Mapping[str, object], prefix: str, where: str) -> list[str]:
    if "names" in group:
        if "count" in group or "name" in group:
            raise NodeSetError(f"{where}: give either names or count (with name), not both")
        names = group["names"]
        if not isinstance(names, list) or not names:
            raise NodeSetError(f"{where}: names must be a non-empty list")
        return [str(n) for n in names]
    count = group.get("count")
    if not isinstance(count, int) or isinstance(count, bool) or count < 1:
        raise NodeSetError(f"{where}: count must be a positive whole number")
    start = group.get("start", 0)
    if not isinstance(start, int) or isinstance(start, bool) or start < 0:
        raise NodeSetError(f"{where}: start must be a whole number >= 0")
    pattern = str(group.get("name") or DEFAULT_PATTERN)
    if "{index" not in pattern:
        raise NodeSetError(f"{where}: name {pattern!r} must contain {{index}}")
    try:
        return [pattern.format(index=i, prefix=prefix) for i in range(start, start + count)]
    except (KeyError, ValueError, IndexError) as error:
        raise NodeSetError(f"{where}: bad name pattern {pattern!r}: {error}") from error


def _member(
    name: str,
    base: NodeSettings,
    pods: PodControllerSettings,
    provider_config: Mapping[str, object],
    group: Mapping[str, object],
    where: str,
) -> Member:
    labels = {
        **base.labels,
        SET_LABEL: node_set_name(base.name),
        **_str_map(group.get("labels"), f"{where}.labels"),
    }
    taints = base.taints
    if "taints" in group:
        raw = group["taints"]
        if not isinstance(raw, list):
            raise NodeSetError(f"{where}.taints must be a list of key[=value]:Effect")
        try:
            taints = tuple(Taint.parse(str(t)) for t in raw)
        except ValueError as error:
            raise NodeSetError(f"{where}.taints: {error}") from error
    extra = group.get("provider_config") or {}
    if not isinstance(extra, Mapping):
        raise NodeSetError(f"{where}.provider_config must be a mapping")
    node = replace(
        base,
        name=name,
        hostname=name,
        labels=labels,
        taints=taints,
        capacity={**base.capacity, **_str_map(group.get("capacity"), f"{where}.capacity")},
        status_interval=max(base.status_interval, NODE_SET_STATUS_INTERVAL),
        spread=True,
    )
    return Member(node, replace(pods, node_name=name), {**provider_config, **extra})


def members(
    base: NodeSettings,
    pods: PodControllerSettings,
    provider_config: Mapping[str, object],
    groups: list[object],
) -> tuple[Member, ...]:
    """The nodes of a set: `groups` as read from the file (or made from --nodes)."""
    if not groups:
        raise NodeSetError("the node set has no nodes")
    out: list[Member] = []
    for n, group in enumerate(groups):
        where = f"nodes[{n}]"
        if not isinstance(group, Mapping):
            raise NodeSetError(f"{where} must be a mapping")
        unknown = set(group) - _GROUP_KEYS
        if unknown:
            raise NodeSetError(f"{where}: unknown keys {', '.join(sorted(map(str, unknown)))}")
        for name in _names(group, base.name, where):
            out.append(_member(name, base, pods, provider_config, group, where))
    seen: set[str] = set()
    for member in out:
        if member.node.name in seen:
            raise NodeSetError(f"node {member.node.name!r} appears twice in the node set")
        seen.add(member.node.name)
    workers = max(2, pods.workers // len(out))
    return tuple(
        replace(
            m,
            node=replace(m.node, port=base.port + i if base.port else 0),
            pods=replace(m.pods, workers=workers),
        )
        for i, m in enumerate(out)
    )


def from_file(data: object) -> list[object]:
    """The groups of a node set file's content (its `nodes` list)."""
    if not isinstance(data, Mapping) or not isinstance(data.get("nodes"), list):
        raise NodeSetError("a node set file holds a mapping with a `nodes` list")
    groups: list[object] = data["nodes"]
    return groups
