"""The conformance specs "ConfigMap should be consumable via the environment" and
"Secrets should be consumable via the environment", as they run: `sh -c env` in the
busybox image with `envFrom` (a ConfigMap whole, and again with a prefix), in
`runtime: oci`, from a real registry on a real vkpy node. Their keys (`data-1`) are
no shell identifiers: busybox's sh must pass them on to `env`, as upstream's does."""

# ruff: noqa: F811 - pytest fixtures are imported by name and then requested as arguments
from __future__ import annotations

from pathlib import Path

from tests.integration.agent import Kube, wait_for
from tests.integration.oci_fixtures import (  # noqa: F401 - registry: a fixture
    ROOT_ONLY,
    busybox_pod,
    logs,
    oci_config,
    registry,
)
from tests.integration.process_fixtures import (  # noqa: F401 - fixtures
    StartProcessAgent,
    reachable_pods_dir,
    start_process_agent,
)
from tests.registry import Registry

pytestmark = ROOT_ONLY


def test_env_from_a_config_map_reaches_sh_c_env(
    kube: Kube,
    start_process_agent: StartProcessAgent,
    registry: Registry,
    reachable_pods_dir: Path,
) -> None:
    agent = start_process_agent(oci_config(registry, reachable_pods_dir))
    kube.create(
        {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {"name": "env-test"},
            "data": {"data-1": "value-1", "data-2": "value-2"},
        }
    )
    image = f"{registry.host}/library/busybox:latest"
    env_from = [
        {"configMapRef": {"name": "env-test"}},
        {"prefix": "p-", "configMapRef": {"name": "env-test"}},
    ]
    kube.create(
        busybox_pod(
            "env-from", agent.node_name, image, command=["sh", "-c", "env"], envFrom=env_from
        )
    )
    wait_for("env-from Succeeded", lambda: kube.phase("env-from") == "Succeeded", timeout=60)
    lines = wait_for("its output", lambda: logs(kube, "env-from")).splitlines()
    for line in ("data-1=value-1", "data-2=value-2", "p-data-1=value-1", "p-data-2=value-2"):
        assert line in lines, lines
