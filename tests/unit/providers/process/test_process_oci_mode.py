"""`runtime: oci` pieces that need no runc: the setting, the pods' host id ranges
(idranges.py) and how a container's resources become cgroup limits."""

from __future__ import annotations

import ipaddress
import os
from pathlib import Path
from types import SimpleNamespace

import pytest

from vkpy.providers.base import ContainerConfig, PodConfig, PodRef
from vkpy.providers.errors import UnsupportedError
from vkpy.providers.process import idranges
from vkpy.providers.process.addresses import AddressPool, PodAddress
from vkpy.providers.process.config import ProcessConfig
from vkpy.providers.process.idranges import IdRanges, NoRangeError
from vkpy.providers.process.ocicontainers import resources_of
from vkpy.providers.process.provider import ProcessProvider
from vkpy.providers.process.runtime import container_env


def make_config(**raw: object) -> ProcessConfig:
    return ProcessConfig.from_dict(raw, state_dir="/tmp/state", internal_ip="127.0.0.1")


def as_user(euid: int, **raw: object) -> ProcessConfig:
    """The settings as a vkpy running with `euid` reads them."""
    return ProcessConfig.from_dict(
        raw, state_dir="/tmp/state", internal_ip="127.0.0.1", node_name="vk-1", euid=euid
    )


def labels(config: ProcessConfig) -> dict[str, str]:
    info = ProcessProvider(config).node_info()
    return {k: v for k, v in info.labels.items() if k in ("vkpy.io/runtime", "vkpy.io/network")}


def test_root_defaults_to_images_on_a_pod_network_and_non_root_to_host_programs() -> None:
    root = as_user(0)
    assert (root.runtime, root.network, root.runtime_defaulted) == ("oci", "pod", True)
    assert root.oci and not root.per_pod_ids and not root.namespaces_per_pod
    # A pod CIDR of the node's own until the Node's podCIDR is known: a /24 from
    # 10.160.0.0/11, the same for the same node, another for another node.
    assert ipaddress.IPv4Network(root.pod_cidr).subnet_of(ipaddress.IPv4Network("10.160.0.0/11"))
    assert ipaddress.IPv4Network(root.pod_cidr).prefixlen == 24
    assert as_user(0).pod_cidr == root.pod_cidr
    other = ProcessConfig.from_dict(
        {}, state_dir="/tmp/state", internal_ip="127.0.0.1", node_name="vk-2", euid=0
    )
    assert other.pod_cidr != root.pod_cidr
    user = as_user(1000)
    assert (user.runtime, user.network, user.pod_cidr) == ("host", "host", "")
    assert not user.oci


def test_host_programs_and_the_host_network_stay_as_explicit_choices() -> None:
    host = as_user(0, runtime="host")
    assert (host.runtime, host.network, host.runtime_defaulted) == ("host", "host", False)
    assert not host.oci
    assert as_user(0, network="host").network == "host"
    assert as_user(0, network="host").runtime == "oci"
    assert as_user(0, pod_cidr="10.244.7.0/24").pod_cidr == "10.244.7.0/24"
    explicit = as_user(1000, runtime="oci", network="pod")
    assert (explicit.runtime, explicit.network) == ("oci", "pod")


@pytest.mark.skipif(os.geteuid() != 0, reason="the labels say what a root vkpy runs")
def test_the_node_says_which_runtime_and_network_it_runs_in() -> None:
    assert labels(as_user(0)) == {"vkpy.io/runtime": "oci", "vkpy.io/network": "pod"}
    assert labels(as_user(0, runtime="host")) == {
        "vkpy.io/runtime": "host",
        "vkpy.io/network": "host",
    }


async def test_a_root_node_without_runc_skopeo_umoci_stops_with_what_to_do(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    empty = tmp_path / "bin"
    empty.mkdir()
    monkeypatch.setenv("PATH", str(empty))
    config = ProcessConfig.from_dict(
        {}, state_dir=str(tmp_path), internal_ip="127.0.0.1", node_name="vk-1", euid=0
    )
    # As root (the check before the tools'): the start stops before doing anything.
    monkeypatch.setattr(os, "geteuid", lambda: 0)
    provider = ProcessProvider(config)
    with pytest.raises(UnsupportedError) as refused:
        await provider.start()
    message = str(refused.value)
    assert "the default when vkpy runs as root" in message
    assert "runc, skopeo, umoci" in message
    assert "make system-deps" in message and "runtime: host" in message
    # Nothing ran instead: no pod directory was made, no stand-in started.
    assert not (tmp_path / "process" / "pods").exists()
    explicit = ProcessConfig.from_dict(
        {"runtime": "oci", "runc": "/nonexistent/runc"},
        state_dir=str(tmp_path),
        internal_ip="127.0.0.1",
        euid=0,
    )
    with pytest.raises(UnsupportedError, match=r"no /nonexistent/runc, skopeo, umoci"):
        await ProcessProvider(explicit).start()


@pytest.mark.skipif(os.geteuid() != 0, reason="runtime: oci starts only as root")
async def test_an_oci_node_whose_pods_dir_pods_cannot_reach_stops_with_why(
    tmp_path: Path,
) -> None:
    closed = tmp_path / "home"
    closed.mkdir(mode=0o700)
    config = ProcessConfig.from_dict(
        {"pods_dir": str(closed / "pods")}, state_dir=str(tmp_path), internal_ip="127.0.0.1"
    )
    assert config.oci
    with pytest.raises(UnsupportedError, match=rf"{closed} is not searchable by other users"):
        await ProcessProvider(config).start()


def test_bad_runtime_settings_are_refused_with_why() -> None:
    with pytest.raises(ValueError, match="runtime must be host or oci"):
        make_config(runtime="docker")
    with pytest.raises(ValueError, match="registries must be a mapping"):
        make_config(runtime="oci", registries=["127.0.0.1:5000"])
    with pytest.raises(ValueError, match="oci_id_base"):
        make_config(runtime="oci", oci_id_base=0)


def test_each_pod_gets_a_range_of_its_own_kept_until_released(tmp_path: Path) -> None:
    claims = tmp_path / "claims"
    ranges = IdRanges(1_000_000, 3, claims)
    pods = [tmp_path / name for name in ("a", "b", "c", "d")]
    for pod in pods:
        pod.mkdir()
    first, second = ranges.claim(pods[0]), ranges.claim(pods[1])
    assert (first.base, second.base) == (1_000_000, 1_065_536)
    assert first.host_id(0) == 1_000_000 and second.host_id(65535) == 1_131_071
    # A restarted vkpy (or another node on the host) finds the same range again.
    assert ranges.claim(pods[0]) == first
    assert IdRanges(1_000_000, 3, claims).claim(pods[1]) == second
    ranges.claim(pods[2])
    with pytest.raises(NoRangeError, match="all 3 pod id ranges"):
        ranges.claim(pods[3])
    ranges.release(first.slot, pods[0])
    assert ranges.claim(pods[3]).base == first.base


def test_a_range_whose_pod_directory_is_gone_is_taken_over(tmp_path: Path) -> None:
    ranges = IdRanges(1_000_000, 1, tmp_path / "claims")
    gone, new = tmp_path / "gone", tmp_path / "new"
    gone.mkdir()
    new.mkdir()
    ranges.claim(gone)
    with pytest.raises(NoRangeError):
        ranges.claim(new)  # still recorded by its pod: never reused
    (gone / idranges.RECORD).unlink()
    gone.rmdir()
    assert ranges.claim(new).slot == 0


def test_ids_outside_the_pods_user_namespace_are_refused() -> None:
    pod = idranges.PodRange(0, 1_000_000)
    with pytest.raises(ValueError, match="outside the pod's user namespace"):
        pod.host_id(65536)


def test_resources_become_cgroup_limits() -> None:
    limits = resources_of({"requests": {"cpu": "250m"}, "limits": {"cpu": "1", "memory": "64Mi"}})
    assert limits.cpu_request_milli == 250
    assert limits.cpu_limit_milli == 1000
    assert limits.memory_limit == 64 * 2**20


def test_status_pod_ip_is_the_pods_own_address_with_a_network_of_its_own() -> None:
    """The chart's VKPY_NODE_IP (status.podIP) in an oci pod with `network: pod`: the
    API server dials the node there, so it must be the pod's address, not the host's
    the kubelet side resolved before the pod had one (the dev cluster's helm install
    registered its node at the worker's address)."""
    spec = {
        "name": "app",
        "env": [
            {"name": "VKPY_NODE_IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}},
            {"name": "OWN", "value": "mine"},
        ],
    }
    config = ContainerConfig(
        "app", "vkpy", (), (), env=(("VKPY_NODE_IP", "127.0.1.2"), ("OWN", "mine")), spec=spec
    )
    pod = PodConfig(PodRef("ns", "p", "uid"), {}, (), (config,), ())
    settings = ProcessConfig(kubernetes_service_host="10.244.0.1")
    own = AddressPool()
    own.hold("uid", PodAddress("10.244.2.3", "10.244.2.0/24", "vkpy-link"))
    runtime = SimpleNamespace(config=settings, addresses=own)
    env = dict(container_env(runtime, pod, config, default_path=False))  # type: ignore[arg-type]
    assert env["VKPY_NODE_IP"] == "10.244.2.3"
    assert env["OWN"] == "mine" and env["KUBERNETES_SERVICE_HOST"] == "10.244.0.1"
    assert "PATH" not in env  # the image's ENV gives it
    on_host = dict(
        container_env(  # type: ignore[arg-type]
            SimpleNamespace(config=settings, addresses=AddressPool()),
            pod,
            config,
            default_path=False,
        )
    )
    assert on_host["VKPY_NODE_IP"] == "127.0.1.2"  # the host's network: the host's address
