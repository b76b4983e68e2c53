"""`runtime: oci` pieces that need no runc: the setting, the pods' host id ranges
(idranges.py) and how a container's resources become cgroup limits."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import pytest

from vkpy.providers.base import ContainerConfig, PodConfig, PodRef
from vkpy.providers.process import idranges
from vkpy.providers.process.config import ProcessConfig
from vkpy.providers.process.idranges import IdRanges, NoRangeError
from vkpy.providers.process.ocicontainers import _pod_env, resources_of


def make_config(**raw: object) -> ProcessConfig:
    return ProcessConfig.from_dict(raw, state_dir="/tmp/state", internal_ip="127.0.0.1")


def test_runtime_defaults_to_host_and_oci_is_opt_in() -> None:
    assert make_config().runtime == "host"
    assert not make_config().oci
    oci = make_config(runtime="oci", registries={"127.0.0.1:5000": {"insecure": True}})
    assert oci.oci
    assert not oci.per_pod_ids  # no pod ids from pod_uid_range: a range per pod
    assert not oci.namespaces_per_pod  # the sandbox holds the namespaces


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
    node = SimpleNamespace(config=ProcessConfig(kubernetes_service_host="10.244.0.1"))
    env = dict(_pod_env(node, pod, config, "10.244.2.3"))  # type: ignore[arg-type]
    assert env["VKPY_NODE_IP"] == "10.244.2.3"
    assert env["OWN"] == "mine" and env["KUBERNETES_SERVICE_HOST"] == "10.244.0.1"
    on_host = dict(_pod_env(node, pod, config, None))  # type: ignore[arg-type]
    assert on_host["VKPY_NODE_IP"] == "127.0.1.2"  # the host's network: the host's address
