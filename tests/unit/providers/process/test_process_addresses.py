"""Pod addresses from the node's pod CIDR (`network: pod`): pure allocation logic."""

from __future__ import annotations

from pathlib import Path

import pytest

from vkpy.providers.process.addresses import (
    AddressPool,
    NoAddressError,
    PodAddress,
    overlapping,
    parse_cidr,
)
from vkpy.providers.process.config import ProcessConfig
from vkpy.providers.process.podnet import alias, link_name


def test_addresses_skip_network_gateway_and_broadcast() -> None:
    pool = AddressPool("10.244.7.0/29")  # .0 network, .1 gateway, .7 broadcast
    given = [pool.allocate(f"pod-{i}", f"l{i}").address for i in range(5)]
    assert given == ["10.244.7.2", "10.244.7.3", "10.244.7.4", "10.244.7.5", "10.244.7.6"]
    with pytest.raises(NoAddressError, match="no free address"):
        pool.allocate("pod-5", "l5")
    first = pool.allocate("pod-0", "l0")
    assert first.gateway == "10.244.7.1"
    assert first.prefix == "10.244.7.0/29"


def test_a_pod_keeps_its_address_and_it_is_never_given_twice() -> None:
    pool = AddressPool("10.244.7.0/24")
    a = pool.allocate("a", "la")
    assert pool.allocate("a", "la") == a
    b = pool.allocate("b", "lb")
    assert b.address != a.address
    assert pool.address("a") == a


def test_a_freed_address_is_taken_last() -> None:
    pool = AddressPool("10.244.7.0/29")
    a = pool.allocate("a", "la")
    pool.allocate("b", "lb")
    pool.release("a")
    # Round-robin: the addresses after the last one given come first.
    following = [pool.allocate(name, name).address for name in ("c", "d", "e")]
    assert following == ["10.244.7.4", "10.244.7.5", "10.244.7.6"]
    assert pool.allocate("f", "f").address == a.address
    with pytest.raises(NoAddressError):
        pool.allocate("g", "g")


def test_addresses_held_after_a_restart_are_not_given_again(tmp_path: Path) -> None:
    before = AddressPool("10.244.7.0/30")  # a single pod address: .2
    only = before.allocate("a", link_name("a"))
    only.save(tmp_path)
    after = AddressPool("10.244.7.0/30")
    loaded = PodAddress.load(tmp_path)
    assert loaded == only
    after.hold("a", loaded)
    with pytest.raises(NoAddressError):
        after.allocate("b", "lb")
    after.release("a")
    assert after.allocate("b", "lb").address == "10.244.7.2"


def test_a_new_cidr_keeps_what_pods_hold() -> None:
    pool = AddressPool()
    with pytest.raises(NoAddressError, match="no pod CIDR"):
        pool.allocate("a", "la")
    pool.set_cidr("10.244.7.0/30")
    old = pool.allocate("a", "la")
    pool.set_cidr("10.244.9.0/24")
    assert pool.address("a") == old
    assert pool.allocate("b", "lb").address == "10.244.9.2"


def test_unreadable_records_are_no_address(tmp_path: Path) -> None:
    assert PodAddress.load(tmp_path) is None
    (tmp_path / "network.json").write_text('{"address": "not an address", "cidr": "x"}')
    assert PodAddress.load(tmp_path) is None


@pytest.mark.parametrize("text", ["10.244.7.0/31", "10.244.7.1/24", "fd00::/64", "nonsense"])
def test_unusable_cidrs_are_refused(text: str) -> None:
    with pytest.raises(ValueError, match="pod CIDR"):
        parse_cidr(text)


def test_config_takes_network_and_pod_cidr() -> None:
    config = ProcessConfig.from_dict(
        {"network": "pod", "pod_cidr": "10.244.7.0/24"}, state_dir="/tmp/x", internal_ip="1.2.3.4"
    )
    assert config.network == "pod"
    host_programs = {"runtime": "host"}  # root's default is oci on `pod`: modes.py
    assert (
        ProcessConfig.from_dict(host_programs, state_dir="/x", internal_ip="1.2.3.4").network
        == "host"
    )
    with pytest.raises(ValueError, match="network must be"):
        ProcessConfig.from_dict({"network": "bridge"}, state_dir="/x", internal_ip="1.2.3.4")
    with pytest.raises(ValueError, match="pod CIDR"):
        ProcessConfig.from_dict({"pod_cidr": "10.0.0.0/32"}, state_dir="/x", internal_ip="1")


def test_link_names_fit_the_kernel_and_aliases_name_node_and_pod() -> None:
    uid = "6f1c2d3e-4b5a-4c6d-8e7f-0123456789ab"
    assert link_name(uid) == "vkp6f1c2d3e4b5a"
    assert len(link_name(uid)) <= 15
    assert alias("vk-1", uid) == f"vkpy:vk-1:{uid}"


def test_a_pod_cidr_over_the_nodes_own_network_is_found() -> None:
    node = [("127.0.0.1", "8"), ("192.0.2.2", "24"), ("198.18.0.1", "32")]
    assert overlapping("10.244.7.0/24", node) == []
    assert overlapping("192.0.2.0/25", node) == ["192.0.2.2/24"]  # the node's LAN
    assert overlapping("198.18.0.0/16", node) == ["198.18.0.1/32"]
    assert overlapping("127.0.0.0/24", node) == []  # loopback is every namespace's own
