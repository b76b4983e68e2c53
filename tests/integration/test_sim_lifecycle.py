"""The sim backend's life-cycle settings seen through the API server: with
`finite_run_seconds` a pod that does not restart Always completes like a program that
finishes (init containers first), and with `probe_delays` a container turns ready only
after its readiness probe's initial delay (the conformance run's sim node uses both)."""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime

from tests.integration.agent import Kube, sim_pod, wait_for
from tests.integration.conftest import StartAgent
from tests.integration.test_agent_pods import condition, container_state

SETTINGS = {"finite_run_seconds": 1, "probe_delays": True}


def seconds(stamp: str) -> float:
    return datetime.fromisoformat(stamp.replace("Z", "+00:00")).timestamp()


def succeeded(kube: Kube, name: str) -> Callable[[], bool]:
    return lambda: kube.phase(name) == "Succeeded"


def test_pods_that_do_not_restart_always_complete(kube: Kube, start_agent: StartAgent) -> None:
    agent = start_agent(config=SETTINGS)
    init = [{"name": "setup", "image": "example.com/setup:1"}]
    kube.create(sim_pod("job", agent.node_name, initContainers=init))
    kube.create(sim_pod("retry", agent.node_name, restart_policy="OnFailure"))
    kube.create(sim_pod("server", agent.node_name, restart_policy="Always"))
    for name in ("job", "retry"):
        wait_for(f"{name} Succeeded", succeeded(kube, name))
        terminated = container_state(kube.get("pod", name))["terminated"]
        assert (terminated["exitCode"], terminated["reason"]) == (0, "Completed")
    job = kube.get("pod", "job")
    assert job is not None
    setup = job["status"]["initContainerStatuses"][0]
    assert setup["state"]["terminated"]["reason"] == "Completed"
    server = kube.get("pod", "server")
    assert server is not None and server["status"]["phase"] == "Running"
    assert "running" in container_state(server)
    assert server["status"]["containerStatuses"][0]["restartCount"] == 0


def test_a_container_is_ready_only_after_its_readiness_probes_initial_delay(
    kube: Kube, start_agent: StartAgent
) -> None:
    agent = start_agent(config=SETTINGS)
    probe = {"exec": {"command": ["true"]}, "initialDelaySeconds": 3, "periodSeconds": 1}
    containers = [{"name": "app", "image": "example.com/app:1", "readinessProbe": probe}]
    kube.create(sim_pod("web", agent.node_name, restart_policy="Always", containers=containers))
    ready = wait_for(
        "Ready", lambda: (p := kube.get("pod", "web")) and condition(p, "Ready") == "True" and p
    )
    started = container_state(ready)["running"]["startedAt"]
    became_ready = next(
        c["lastTransitionTime"] for c in ready["status"]["conditions"] if c["type"] == "Ready"
    )
    assert seconds(became_ready) - seconds(started) >= 3
    assert ready["status"]["containerStatuses"][0]["restartCount"] == 0


def test_a_sidecar_runs_beside_the_app_and_the_regular_init_container_completes(
    kube: Kube, start_agent: StartAgent
) -> None:
    agent = start_agent(config=SETTINGS)
    inits = [
        {"name": "setup", "image": "example.com/setup:1"},
        {"name": "proxy", "image": "example.com/proxy:1", "restartPolicy": "Always"},
    ]
    kube.create(sim_pod("meshed", agent.node_name, restart_policy="Always", initContainers=inits))
    pod = wait_for(
        "Ready", lambda: (p := kube.get("pod", "meshed")) and condition(p, "Ready") == "True" and p
    )
    statuses = {s["name"]: s for s in pod["status"]["initContainerStatuses"]}
    assert statuses["setup"]["state"]["terminated"]["reason"] == "Completed"
    assert "running" in statuses["proxy"]["state"]
    assert statuses["proxy"]["ready"] is True
