"""resolv.conf of a `runtime: oci` pod from dnsPolicy/dnsConfig and the node's file
(ocietc.py): the kubelet's merge rules and limits, on plain data; its MissingClusterDNS
message; the pod's files written once in its directory."""

from __future__ import annotations

import os
from pathlib import Path

from vkpy.providers.base import PodConfig, PodRef
from vkpy.providers.process.layout import PodDir
from vkpy.providers.process.ocietc import (
    DnsConfig,
    missing_cluster_dns,
    node_resolv_conf,
    parse_resolv_conf,
    pod_dns,
    write_files,
)

NODE = parse_resolv_conf(
    "# managed\nnameserver 10.0.0.2\nnameserver 10.0.0.3 ; second\n"
    "search corp.example lab.example\noptions rotate ndots:1\n"
)


def test_the_nodes_file_is_read_as_the_resolver_reads_it() -> None:
    assert NODE.nameservers == ["10.0.0.2", "10.0.0.3"]
    assert NODE.searches == ["corp.example", "lab.example"]
    assert NODE.options == ["rotate", "ndots:1"]


def test_cluster_first_without_cluster_dns_falls_back_to_the_nodes_file() -> None:
    for policy in (None, "ClusterFirst", "ClusterFirstWithHostNet", "Default"):
        spec = {} if policy is None else {"dnsPolicy": policy}
        assert pod_dns(spec, NODE).text() == (
            "search corp.example lab.example\n"
            "nameserver 10.0.0.2\nnameserver 10.0.0.3\n"
            "options rotate ndots:1\n"
        )


def test_dns_config_is_appended_its_options_replacing_the_nodes_by_name() -> None:
    spec = {
        "dnsConfig": {
            "nameservers": ["10.0.0.3", "10.9.9.9"],
            "searches": ["corp.example", "pod.example"],
            "options": [{"name": "ndots", "value": "5"}, {"name": "edns0"}],
        }
    }
    assert pod_dns(spec, NODE) == DnsConfig(
        ["10.0.0.2", "10.0.0.3", "10.9.9.9"],
        ["corp.example", "lab.example", "pod.example"],
        ["rotate", "ndots:5", "edns0"],
    )


def test_policy_none_is_the_dns_config_alone_within_the_kubelets_limits() -> None:
    spec = {
        "dnsPolicy": "None",
        "dnsConfig": {
            "nameservers": ["1.1.1.1", "1.0.0.1", "8.8.8.8", "8.8.4.4"],
            "searches": [f"s{n}.example" for n in range(40)],
        },
    }
    got = pod_dns(spec, NODE)
    assert got.nameservers == ["1.1.1.1", "1.0.0.1", "8.8.8.8"]
    assert len(got.searches) == 32 and got.searches[0] == "s0.example"
    assert got.options == []
    assert pod_dns({"dnsPolicy": "None"}, NODE).text() == ""


def test_a_loopback_stub_gives_way_to_the_upstream_file(tmp_path: Path) -> None:
    stub, upstream = tmp_path / "resolv.conf", tmp_path / "upstream.conf"
    stub.write_text("nameserver 127.0.0.53\noptions edns0 trust-ad\nsearch .\n")
    upstream.write_text("nameserver 192.0.2.1\n")
    assert node_resolv_conf(stub, upstream).nameservers == ["192.0.2.1"]
    assert node_resolv_conf(stub, tmp_path / "absent").nameservers == ["127.0.0.53"]
    assert node_resolv_conf(tmp_path / "absent", upstream) == DnsConfig()


def pod(**spec: object) -> PodConfig:
    return PodConfig(
        ref=PodRef("team", "web-0", "uid-7"),
        pod={"spec": dict(spec)},
        init_containers=(),
        containers=(),
    )


def test_missing_cluster_dns_is_said_only_for_the_policies_that_ask_for_it() -> None:
    said = missing_cluster_dns(pod())
    assert said == (
        'pod: "web-0_team(uid-7)". kubelet does not have ClusterDNS IP configured and '
        'cannot create Pod using "ClusterFirst" policy. Falling back to "Default" policy.'
    )
    assert missing_cluster_dns(pod(dnsPolicy="ClusterFirstWithHostNet", hostNetwork=True))
    assert missing_cluster_dns(pod(hostNetwork=True)) is None  # ClusterFirst → Default
    assert missing_cluster_dns(pod(dnsPolicy="Default")) is None
    assert missing_cluster_dns(pod(dnsPolicy="None")) is None


def test_the_files_are_written_once_and_what_the_pod_changed_stays(tmp_path: Path) -> None:
    pod_dir = PodDir(tmp_path)
    web = pod(hostname="web-0", hostAliases=[{"ip": "10.1.1.1", "hostnames": ["db"]}])
    owner = os.getuid()
    assert write_files(web, pod_dir, "10.244.0.9", "", owner)
    hosts = tmp_path / "etc-hosts"
    assert "10.244.0.9\tweb-0" in hosts.read_text().splitlines()
    assert "10.1.1.1\tdb" in hosts.read_text().splitlines()
    assert (tmp_path / "etc-hostname").read_text() == "web-0\n"
    hosts.write_text(hosts.read_text() + "10.2.2.2 added\n")
    assert not write_files(web, pod_dir, "10.244.0.9", "", owner)
    assert hosts.read_text().endswith("10.2.2.2 added\n")
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "etc-hostname",
        "etc-hosts",
        "etc-resolv.conf",
    ]
