"""Fixtures shared by the whole suite: a real control plane, kubectl, namespaces.

Integration tests run against the pinned Kubernetes release, started once per test
session in a temporary directory (or, with `VKPY_TEST_KUBECONFIG=<kubeconfig>`, a
cluster you already have, e.g. `.cluster/kubeconfig` from `make cluster`, which
saves the start-up). Tests that use these fixtures are marked `cluster`
automatically, so `pytest -m "not cluster"` runs everything else.

Fixtures:
  kubectl        Path of the pinned kubectl (never the one on PATH).
  cluster        ClusterAccess (kubeconfig, kubectl, server, run_kubectl) of the
                 cluster under test.
  local_cluster  The DevCluster started by this session, for tests that need its
                 PKI (CAs, kubelet signing CA); started even when
                 VKPY_TEST_KUBECONFIG names another cluster.
  run_kubectl    run_kubectl(*args, input=None, timeout=60.0, check=True) ->
                 CompletedProcess[str], bound to the cluster's kubeconfig.
  namespace      A fresh namespace (its default ServiceAccount exists), deleted
                 afterwards without waiting.
"""

from __future__ import annotations

import os
import secrets
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.namespaces import create_namespace
from vkpy.devcluster import ClusterAccess, DevCluster, RunKubectl, find_bin_dir

ENV_KUBECONFIG = "VKPY_TEST_KUBECONFIG"
CLUSTER_FIXTURES = frozenset({"cluster", "local_cluster", "run_kubectl", "namespace"})


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if CLUSTER_FIXTURES.intersection(getattr(item, "fixturenames", ())):
            item.add_marker(pytest.mark.cluster)


@pytest.fixture(scope="session")
def kubectl() -> Path:
    return find_bin_dir() / "kubectl"


@pytest.fixture(scope="session")
def local_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[DevCluster]:
    dev = DevCluster(tmp_path_factory.mktemp("cluster"))
    dev.up()
    try:
        yield dev
    finally:
        dev.down()


@pytest.fixture(scope="session")
def cluster(request: pytest.FixtureRequest, kubectl: Path) -> ClusterAccess:
    external = os.environ.get(ENV_KUBECONFIG)
    if external:
        return ClusterAccess(kubeconfig=Path(external).absolute(), kubectl=kubectl)
    dev: DevCluster = request.getfixturevalue("local_cluster")
    return dev.access()


@pytest.fixture(scope="session")
def run_kubectl(cluster: ClusterAccess) -> RunKubectl:
    return cluster.run_kubectl


@pytest.fixture
def namespace(run_kubectl: RunKubectl) -> Iterator[str]:
    name = f"vkpy-t-{secrets.token_hex(4)}"
    create_namespace(run_kubectl, name)
    try:
        yield name
    finally:
        run_kubectl("delete", "namespace", name, "--wait=false", check=False)
