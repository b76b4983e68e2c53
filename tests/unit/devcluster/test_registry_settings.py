"""The mirrors the dev cluster gives its nodes (vkpy/devcluster/registry.py, nodes.py):
the public registries' names mapped to the local registry, in the form the process
backend's `registries:` setting and containers-registries.conf(5) take."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from vkpy.devcluster import nodes, registry
from vkpy.devcluster.images import all_images
from vkpy.oci.images import registries
from vkpy.oci.images.reference import parse

HOST = "127.0.0.1:40123"


def test_the_mirrors_setting_is_what_the_backend_reads() -> None:
    hosts = {h.host: h for h in registries.from_config(registry.mirrors_setting(HOST))}
    assert hosts["docker.io"].mirrors == (registries.Endpoint(f"{HOST}/docker.io", True),)
    assert hosts["registry.k8s.io"].mirrors == (
        registries.Endpoint(f"{HOST}/registry.k8s.io", True),
    )
    assert hosts[HOST].insecure
    conf = registry.registries_conf(registry.mirrors_setting(HOST))
    assert 'prefix = "docker.io"' in conf
    assert f'location = "{HOST}/docker.io"' in conf


def test_public_names_are_stored_below_their_registry_host() -> None:
    assert registry.local_name(HOST, "docker.io/library/nginx:alpine") == (
        f"{HOST}/docker.io/library/nginx:alpine"
    )


@pytest.mark.parametrize("reads", [True, False])
def test_process_nodes_get_the_mirrors_when_their_backend_reads_them(
    monkeypatch: pytest.MonkeyPatch, reads: bool
) -> None:
    monkeypatch.setattr(nodes, "backend_reads_registries", lambda: reads)
    setting = registry.mirrors_setting(HOST)
    worker = nodes.provider_config(nodes.worker(1), "https://127.0.0.1:6443", setting)
    assert ("registries" in worker) is reads
    if reads:
        assert worker["registries"] == setting
    gpu = nodes.provider_config(nodes.gpu_virtual(), "https://127.0.0.1:6443", setting)
    assert "registries" not in gpu  # the sim backend pulls nothing


def test_without_a_registry_no_mirrors_are_written(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(nodes, "backend_reads_registries", lambda: True)
    assert "registries" not in nodes.provider_config(nodes.worker(1), "https://127.0.0.1:6443")


def test_the_images_a_fresh_clone_names_are_served() -> None:
    """The chart's default image, the getting-started pod's and examples/hello.yaml's,
    as the kubelet reads their names, are among the names the registry serves."""
    root = Path(__file__).resolve().parents[3]
    chart = yaml.safe_load((root / "charts/vkpy/Chart.yaml").read_text())
    values = yaml.safe_load((root / "charts/vkpy/values.yaml").read_text())
    hello = [
        c["image"]
        for doc in yaml.safe_load_all((root / "examples/hello.yaml").read_text())
        if doc and doc.get("kind") == "Pod"
        for c in doc["spec"]["containers"]
    ]
    wanted = [f"{values['image']['repository']}:{chart['appVersion']}", "nginx:alpine", *hello]
    served = {r for image in all_images() for r in image.references}
    for name in wanted:
        assert str(parse(name)) in served, name
