"""Which pod has which address of the node's pod CIDR (`network: pod`), as pure logic.

In `network: pod` mode every pod gets an address of its own from the node's pod
CIDR, on the pod end of a veth pair (podnet.py). The first address of the CIDR is
the node's end of every pair (the pods' gateway); the network and broadcast
addresses are never given. An address is recorded in the pod's directory
(`network.json`) before the pod's network is made, held again from there after a
restart of vkpy, and free only once the pod's directory is gone: an address is
never given to a second pod while anything of the first remains. New addresses are
taken round-robin after the last one given, so an address just freed is the last
to be taken again (a client still talking to the old pod does not reach a new one).
"""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass
from pathlib import Path

from vkpy.providers.process.layout import read_json, write_json

RECORD = "network.json"


class NoAddressError(Exception):
    """The pod CIDR has no free address left (or there is no pod CIDR yet)."""


def parse_cidr(text: str) -> ipaddress.IPv4Network:
    """An IPv4 pod CIDR with room for a gateway and at least one pod; ValueError if not."""
    try:
        network = ipaddress.IPv4Network(text.strip(), strict=True)
    except ValueError as error:
        raise ValueError(f"pod CIDR {text!r}: {error}") from None
    if network.prefixlen > 30:
        raise ValueError(f"pod CIDR {text!r} is too small: at most /30")
    return network


def overlapping(cidr: str, node_addresses: list[tuple[str, str]]) -> list[str]:
    """The node's own addresses (`(address, prefix length)` of links vkpy did not
    make) that a pod CIDR would cover: a pod CIDR there would shadow the node's own
    network (its gateway's address made local, routes to real hosts taken over)."""
    network = parse_cidr(cidr)
    found = []
    for address, length in node_addresses:
        try:
            theirs = ipaddress.IPv4Network(f"{address}/{length}", strict=False)
        except ValueError:
            continue
        if theirs.overlaps(network) and not theirs.network_address.is_loopback:
            found.append(f"{address}/{length}")
    return found


def gateway(network: ipaddress.IPv4Network) -> ipaddress.IPv4Address:
    """The node's end of every pod's veth pair: the first host address."""
    return network.network_address + 1


@dataclass(frozen=True)
class PodAddress:
    """A pod's network as recorded in its directory."""

    address: str
    prefix: str
    """The pod CIDR the address came from (its gateway is the pod's default route)."""
    link: str
    """The node's end of the veth pair (podnet.link_name)."""

    @property
    def gateway(self) -> str:
        return str(gateway(ipaddress.IPv4Network(self.prefix)))

    def save(self, pod_dir: Path) -> None:
        write_json(
            pod_dir / RECORD, {"address": self.address, "cidr": self.prefix, "link": self.link}
        )

    @classmethod
    def load(cls, pod_dir: Path) -> PodAddress | None:
        raw = read_json(pod_dir / RECORD)
        if not isinstance(raw, dict):
            return None
        try:
            address = str(ipaddress.IPv4Address(str(raw["address"])))
            prefix = str(ipaddress.IPv4Network(str(raw["cidr"])))
        except (KeyError, ValueError):
            return None
        return cls(address, prefix, str(raw.get("link") or ""))


class AddressPool:
    """The node's pod addresses: which pod holds which, and a free one for a new pod."""

    def __init__(self, cidr: str = "") -> None:
        self._network: ipaddress.IPv4Network | None = parse_cidr(cidr) if cidr else None
        self._held: dict[str, PodAddress] = {}
        self._last: ipaddress.IPv4Address | None = None

    @property
    def cidr(self) -> str:
        return str(self._network) if self._network is not None else ""

    def set_cidr(self, cidr: str) -> None:
        """Take a new pod CIDR (the Node's spec.podCIDR); addresses held stay held."""
        network = parse_cidr(cidr)
        if network != self._network:
            self._network = network
            self._last = None

    def hold(self, pod_uid: str, address: PodAddress) -> None:
        """Record an address found on disk (after a restart), wherever it came from."""
        self._held[pod_uid] = address

    def release(self, pod_uid: str) -> None:
        self._held.pop(pod_uid, None)

    def address(self, pod_uid: str) -> PodAddress | None:
        return self._held.get(pod_uid)

    def allocate(self, pod_uid: str, link: str) -> PodAddress:
        """The pod's address: the one it holds, else the next free one of the CIDR."""
        held = self._held.get(pod_uid)
        if held is not None:
            return held
        network = self._network
        if network is None:
            raise NoAddressError("this node has no pod CIDR yet (pod_cidr, or the Node's podCIDR)")
        taken = {a.address for a in self._held.values()}
        first = int(gateway(network)) + 1
        last = int(network.broadcast_address) - 1
        size = last - first + 1
        start = first
        if self._last is not None and first <= int(self._last) <= last:
            start = int(self._last) + 1
        for step in range(size):
            candidate = ipaddress.IPv4Address(first + (start - first + step) % size)
            if str(candidate) not in taken:
                self._last = candidate
                given = PodAddress(str(candidate), str(network), link)
                self._held[pod_uid] = given
                return given
        raise NoAddressError(f"no free address left in the pod CIDR {network}")
