"""Service-link variables on a real API server: the Services of a pod's namespace, as
vkpy's watch of every Service has them (a kubelet's informer), reach the pod's
environment; a Service made or deleted before a pod is created is in (or out of) it."""

# ruff: noqa: F811 - pytest fixtures are imported by name and then requested as arguments
from __future__ import annotations

import time

from tests.integration.agent import Kube, wait_for
from tests.integration.process_fixtures import (  # noqa: F401 - fixtures
    StartProcessAgent,
    phase_is,
    pod_dir,
    process_pod,
    start_process_agent,
)

SCRIPT = "env | grep -E '^(DB|CACHE)_(SERVICE_HOST|SERVICE_PORT_PG|PORT)=' | sort"


def service(name: str, port: int) -> dict[str, object]:
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": name},
        "spec": {"selector": {"app": name}, "ports": [{"name": "pg", "port": port}]},
    }


def variables(kube: Kube, agent: object, name: str) -> dict[str, str]:
    wait_for(f"{name} Succeeded", lambda: phase_is(kube, name, "Succeeded"), timeout=60)
    log = pod_dir(agent, kube, name) / "containers/app/instances/0/output.log"  # type: ignore[arg-type]
    out = {}
    for line in log.read_text().splitlines():
        key, _, value = line.split(" ", 3)[-1].partition("=")
        out[key] = value
    return out


def test_pods_get_the_variables_of_the_services_the_watch_has(
    kube: Kube, start_process_agent: StartProcessAgent
) -> None:
    agent = start_process_agent()
    db = kube.create(service("db", 5432))
    db_ip = db["spec"]["clusterIP"]
    kube.create(process_pod("first", agent.node_name, SCRIPT))
    assert variables(kube, agent, "first") == {
        "DB_SERVICE_HOST": db_ip,
        "DB_SERVICE_PORT_PG": "5432",
        "DB_PORT": f"tcp://{db_ip}:5432",
    }

    cache = kube.create(service("cache", 6379))
    kube.kubectl("delete", "-n", kube.namespace, "service", "db")
    time.sleep(1)  # the watch's events reach vkpy in milliseconds; a kubelet's informer too
    kube.create(process_pod("second", agent.node_name, SCRIPT))
    cache_ip = cache["spec"]["clusterIP"]
    assert variables(kube, agent, "second") == {
        "CACHE_SERVICE_HOST": cache_ip,
        "CACHE_SERVICE_PORT_PG": "6379",
        "CACHE_PORT": f"tcp://{cache_ip}:6379",
    }
