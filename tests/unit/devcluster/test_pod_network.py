"""Worker pod CIDRs claimed host-wide (vkpy/devcluster/pod_network.py): never one /24
for two nodes running side by side, the same one again for a restarted worker, a
dead cluster's taken over, a network the host already has never taken."""

from __future__ import annotations

import ipaddress
import os
import time
from pathlib import Path

import pytest

from vkpy.devcluster import nodes, pod_network


def no_networks() -> list[ipaddress.IPv4Network]:
    return []


def test_two_clusters_never_share_a_cidr_and_a_restart_gets_its_own(tmp_path: Path) -> None:
    claims, one, two = tmp_path / "claims", tmp_path / "one", tmp_path / "two"
    one.mkdir()
    two.mkdir()

    def claim(cluster: Path, node: str) -> str:
        return pod_network.claim(cluster, node, lambda *_: True, claims, no_networks)

    first = claim(one, "vkpy-worker-1")
    second = claim(one, "vkpy-worker-2")
    third = claim(two, "vkpy-worker-1")
    assert len({first, second, third}) == 3
    network = ipaddress.ip_network(pod_network.CLUSTER_CIDR)
    for cidr in (first, second, third):
        ours = ipaddress.ip_network(cidr)
        assert ours.subnet_of(network) and ours.prefixlen == 24  # type: ignore[arg-type]
        assert ipaddress.ip_address(pod_network.API_ADDRESS) not in ours
    assert claim(one, "vkpy-worker-1") == first  # a restarted worker keeps its pods' addresses
    pod_network.release(one, "vkpy-worker-1", claims)
    assert claim(two, "vkpy-worker-9") == first  # released: free again


def test_a_claim_of_a_cluster_that_is_gone_is_taken_over(tmp_path: Path) -> None:
    claims, gone, live = tmp_path / "claims", tmp_path / "gone", tmp_path / "live"
    gone.mkdir()
    live.mkdir()
    taken = pod_network.claim(gone, "w", lambda *_: True, claims, no_networks)
    # its node not running, but claimed a moment ago (about to start): kept
    assert pod_network.claim(live, "w", lambda *_: False, claims, no_networks) != taken
    pod_network.release(live, "w", claims)
    path = claims / taken.replace("/", "-")
    old = time.time() - pod_network.CLAIM_GRACE - 1
    os.utime(path, (old, old))
    assert pod_network.claim(live, "w", lambda *_: False, claims, no_networks) == taken
    pod_network.release(live, "w", claims)
    again = pod_network.claim(gone, "w", lambda *_: True, claims, no_networks)
    gone.rmdir()  # its cluster directory gone: taken over at once, running or not
    assert pod_network.claim(live, "w", lambda *_: True, claims, no_networks) == again


def test_networks_the_host_has_are_skipped(tmp_path: Path) -> None:
    busy = [ipaddress.IPv4Network("10.244.1.7/32"), ipaddress.IPv4Network("10.244.2.0/23")]
    got = pod_network.claim(tmp_path, "w", lambda *_: True, tmp_path / "c", lambda: busy)
    assert got == "10.244.4.0/24"


def test_slots_are_bounded() -> None:
    assert pod_network.slot_cidr(1) == "10.244.1.0/24"
    with pytest.raises(ValueError):
        pod_network.slot_cidr(0)


def test_down_removes_an_oci_nodes_pods_directory_but_nothing_else(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The pods of a `runtime: oci` node live outside the cluster directory
    (nodes.reachable_pods_dir); `down` deletes them, never a directory it did not make."""
    root = tmp_path / "lib" / "devcluster"
    monkeypatch.setattr(nodes, "RUN_PODS_ROOT", root)
    node_dir = tmp_path / "cluster" / "nodes" / "vkpy-worker-1"
    pods = nodes.reachable_pods_dir(node_dir)
    (pods / "uid" / "rootfs").mkdir(parents=True)
    assert nodes.remove_oci_pods_dir(node_dir / "state")
    assert not pods.exists() and root.is_dir()
    assert not (node_dir / "state" / "process" / "pods").is_symlink()
    other = tmp_path / "cluster" / "nodes" / "vkpy-worker-2"
    elsewhere = tmp_path / "mine"
    elsewhere.mkdir()
    (other / "state" / "process").mkdir(parents=True)
    (other / "state" / "process" / "pods").symlink_to(elsewhere)
    assert not nodes.remove_oci_pods_dir(other / "state")
    assert elsewhere.is_dir()
