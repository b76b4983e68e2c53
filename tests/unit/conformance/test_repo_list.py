"""KUBE_TEST_REPO_LIST (conformance/run.py) and the suite's image names the dev
cluster serves (vkpy/devcluster/images/catalogue.py), against the pinned Kubernetes
module's own test/utils/image/manifest.go: a new pin that renames an image or a
registry key fails here, not an hour into `make conformance`."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest
import yaml

from conformance import run as conformance_run
from vkpy.devcluster import registry
from vkpy.devcluster.binaries import CONTROLPLANE_DIR
from vkpy.devcluster.images import all_images
from vkpy.devcluster.images.catalogue import E2E_NAMES

HOST = "127.0.0.1:40555"


@pytest.fixture(scope="module")
def manifest() -> str:
    """The pinned suite's manifest.go (the e2e tool's Kubernetes module)."""
    module = subprocess.run(
        ["go", "list", "-m", "-f", "{{.Dir}}", "k8s.io/kubernetes"],
        cwd=CONTROLPLANE_DIR / "tools" / "e2e",
        capture_output=True, text=True, check=True, timeout=300,
    ).stdout.strip()  # fmt: skip
    return (Path(module) / "test/utils/image/manifest.go").read_text()


def suite_images(manifest: str) -> set[str]:
    """Every image the suite names, with the default registries."""
    block = manifest.split("initRegistry = RegistryList{", 1)[1].split("}", 1)[0]
    defaults = dict(re.findall(r'(\w+):\s+"([^"]+)"', block))
    configs = re.findall(r'Config\{list\.(\w+), "([^"]+)", "([^"]+)"\}', manifest)
    return {f"{defaults[key]}/{name}:{tag}" for key, name, tag in configs}


def test_the_repo_list_keys_are_the_suites(manifest: str) -> None:
    listed = yaml.safe_load(conformance_run.repo_list(HOST))
    tags = set(re.findall(r'yaml:"(\w+)"', manifest))
    assert set(listed) <= tags
    for key, location in listed.items():
        # Where the suite's default for the key is stored in the local registry.
        default = re.search(rf'{key[0].upper()}{key[1:]}:\s+"([^"]+)"', manifest)
        assert default is not None, key
        assert location == f"{HOST}/{default.group(1)}"


def test_the_suites_images_built_here_are_served_under_its_names(manifest: str) -> None:
    wanted = suite_images(manifest)
    served = {r for image in all_images() for r in image.references}
    assert set(E2E_NAMES) <= wanted
    assert set(E2E_NAMES) <= served
    # The repo list takes each of them to where the registry stores its public name.
    listed = yaml.safe_load(conformance_run.repo_list(HOST))
    agnhost = "registry.k8s.io/e2e-test-images/agnhost:2.63.0"
    assert f"{listed['promoterE2eRegistry']}/agnhost:2.63.0" == registry.local_name(HOST, agnhost)
    pause = "registry.k8s.io/pause:3.10.2"
    assert f"{listed['gcRegistry']}/pause:3.10.2" == registry.local_name(HOST, pause)
