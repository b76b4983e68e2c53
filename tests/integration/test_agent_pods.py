"""Pods on the virtual node with the sim backend, checked through kubectl."""

from __future__ import annotations

import json
import signal
import time
import urllib.request
from pathlib import Path
from typing import Any

from prometheus_client.parser import text_string_to_metric_families

from tests.integration.agent import Kube, free_port, sim_pod, wait_for
from tests.integration.cannot_start import cannot_start
from tests.integration.conftest import StartAgent


def container_state(pod: dict[str, Any] | None, name: str = "app") -> dict[str, Any]:
    for status in (pod or {}).get("status", {}).get("containerStatuses", []):
        if status["name"] == name:
            state: dict[str, Any] = status["state"]
            return state
    return {}


def condition(pod: dict[str, Any] | None, kind: str) -> str | None:
    for c in (pod or {}).get("status", {}).get("conditions", []):
        if c["type"] == kind:
            return str(c["status"])
    return None


def test_pod_goes_pending_then_running_with_container_statuses(
    kube: Kube, start_agent: StartAgent
) -> None:
    agent = start_agent(config={"start_seconds": 2})
    kube.create(sim_pod("web", agent.node_name))
    pending = wait_for(
        "ContainerCreating while the backend starts the pod",
        lambda: (
            (p := kube.get("pod", "web"))
            and container_state(p).get("waiting", {}).get("reason") == "ContainerCreating"
            and p
        ),
    )
    assert pending["status"]["phase"] == "Pending"
    assert condition(pending, "Ready") == "False"
    running = wait_for(
        "Running", lambda: (p := kube.get("pod", "web")) and p["status"]["phase"] == "Running" and p
    )
    assert "running" in container_state(running)
    assert condition(running, "Ready") == "True"
    assert running["status"]["podIP"] == "127.0.0.1"
    assert running["status"]["startTime"]
    reasons = {e["reason"] for e in kube.events("web")}
    assert "Started" in reasons


def test_exit_codes_make_succeeded_and_failed(kube: Kube, start_agent: StartAgent) -> None:
    agent = start_agent()
    kube.create(sim_pod("ok", agent.node_name, {"sim.vkpy.io/run-seconds": "1"}))
    kube.create(
        sim_pod(
            "bad", agent.node_name, {"sim.vkpy.io/run-seconds": "1", "sim.vkpy.io/exit-code": "3"}
        )
    )
    wait_for("Succeeded", lambda: kube.phase("ok") == "Succeeded")
    wait_for("Failed", lambda: kube.phase("bad") == "Failed")
    terminated = container_state(kube.get("pod", "bad"))["terminated"]
    assert terminated["exitCode"] == 3
    assert terminated["reason"] == "Error"
    assert container_state(kube.get("pod", "ok"))["terminated"]["exitCode"] == 0


def test_deployment_scheduled_by_the_real_scheduler_runs(
    kube: Kube, start_agent: StartAgent
) -> None:
    agent = start_agent()
    wait_for(
        "node Ready",
        lambda: condition(kube.get("node", agent.node_name, namespaced=False), "Ready") == "True",
    )
    template = sim_pod("x", agent.node_name)
    del template["spec"]["nodeName"]
    template["spec"]["restartPolicy"] = "Always"
    template["spec"]["nodeSelector"] = {"kubernetes.io/hostname": agent.node_name}
    template["spec"]["tolerations"] = [
        {"key": "virtual-kubelet.io/provider", "operator": "Exists", "effect": "NoSchedule"}
    ]
    kube.apply(
        {
            "apiVersion": "apps/v1",
            "kind": "Deployment",
            "metadata": {"name": "web"},
            "spec": {
                "replicas": 3,
                "selector": {"matchLabels": {"app": "web"}},
                "template": {"metadata": {"labels": {"app": "web"}}, "spec": template["spec"]},
            },
        }
    )

    def all_running() -> bool:
        pods = kube.list("pods", "app=web")
        return len(pods) == 3 and all(
            p["spec"].get("nodeName") == agent.node_name and p["status"].get("phase") == "Running"
            for p in pods
        )

    wait_for("3 replicas Running", all_running, timeout=90)
    kube.kubectl("rollout", "status", "deployment/web", "-n", kube.namespace, "--timeout=60s")


def test_delete_waits_for_grace_and_force_delete_is_immediate(
    kube: Kube, start_agent: StartAgent
) -> None:
    agent = start_agent()
    for name in ("graceful", "forced"):
        kube.create(sim_pod(name, agent.node_name, terminationGracePeriodSeconds=5))
        wait_for("Running", lambda n=name: kube.phase(n) == "Running")
    started = time.monotonic()
    kube.kubectl("delete", "pod", "graceful", "-n", kube.namespace, "--timeout=60s")
    assert kube.get("pod", "graceful") is None
    assert time.monotonic() - started < 30
    kube.kubectl("delete", "pod", "forced", "-n", kube.namespace, "--grace-period=0", "--force")
    assert kube.get("pod", "forced") is None
    records = list((agent.state_dir / "sim").glob("*.json"))
    wait_for(
        "backend forgets both pods", lambda: not list((agent.state_dir / "sim").glob("*.json"))
    )
    assert len(records) <= 1


def test_labels_written_by_others_survive_status_updates(
    kube: Kube, start_agent: StartAgent
) -> None:
    agent = start_agent(config={"restart_delay": 0.2})
    kube.create(
        sim_pod(
            "flappy",
            agent.node_name,
            {"sim.vkpy.io/run-seconds": "0.5", "sim.vkpy.io/exit-code": "1"},
            "Always",
        )
    )
    wait_for("Running", lambda: kube.phase("flappy") == "Running")
    kube.kubectl("label", "pod", "flappy", "-n", kube.namespace, "team=blue")
    kube.kubectl("annotate", "pod", "flappy", "-n", kube.namespace, "note=kept")

    def restarts() -> int:
        pod = kube.get("pod", "flappy") or {}
        statuses = pod.get("status", {}).get("containerStatuses", [{}])
        return int(statuses[0].get("restartCount", 0))

    wait_for("several restarts", lambda: restarts() >= 4, timeout=60)
    pod = kube.get("pod", "flappy")
    assert pod is not None
    assert pod["metadata"]["labels"]["team"] == "blue"
    assert pod["metadata"]["annotations"]["note"] == "kept"
    assert "BackOff" in {e["reason"] for e in kube.events("flappy")}


def test_missing_config_map_keeps_pod_pending_until_it_appears(
    kube: Kube, start_agent: StartAgent
) -> None:
    agent = start_agent()
    env = [
        {"name": "COLOR", "valueFrom": {"configMapKeyRef": {"name": "settings", "key": "color"}}}
    ]
    kube.create(
        sim_pod(
            "needs-config", agent.node_name, containers=[{"name": "app", "image": "x", "env": env}]
        )
    )
    waiting = wait_for(
        "CreateContainerConfigError",
        lambda: (
            container_state(kube.get("pod", "needs-config")).get("waiting", {}).get("reason")
            == "CreateContainerConfigError"
            and kube.get("pod", "needs-config")
        ),
    )
    assert waiting["status"]["phase"] == "Pending"
    assert 'configmap "settings" not found' in container_state(waiting)["waiting"]["message"]
    wait_for(
        "Warning Event",
        lambda: any(
            e["type"] == "Warning" and "settings" in e["message"]
            for e in kube.events("needs-config")
        ),
    )
    kube.kubectl(
        "create", "configmap", "settings", "-n", kube.namespace, "--from-literal=color=blue"
    )
    wait_for(
        "Running once the ConfigMap exists",
        lambda: kube.phase("needs-config") == "Running",
        timeout=60,
    )


def test_faults_in_the_backend_still_converge(kube: Kube, start_agent: StartAgent) -> None:
    agent = start_agent(config={"failure_rate": 0.4, "seed": 7})
    names = [f"p{n}" for n in range(8)]
    for name in names:
        annotations = {"sim.vkpy.io/run-seconds": "1"} if name in ("p0", "p1") else {}
        kube.create(sim_pod(name, agent.node_name, annotations))
    expected = {name: ("Succeeded" if name in ("p0", "p1") else "Running") for name in names}
    wait_for(
        "every pod in its right phase",
        lambda: {n: kube.phase(n) for n in names} == expected,
        timeout=120,
    )
    kube.kubectl("delete", "pod", "p2", "-n", kube.namespace, "--timeout=60s")
    assert kube.get("pod", "p2") is None


def test_sigkill_and_restart_neither_duplicates_nor_loses_pods(
    kube: Kube, start_agent: StartAgent
) -> None:
    agent = start_agent()
    names = [f"k{n}" for n in range(5)]
    for name in names:
        kube.create(sim_pod(name, agent.node_name))
    wait_for("all Running", lambda: all(kube.phase(n) == "Running" for n in names))
    uids = {kube.get("pod", n)["metadata"]["uid"] for n in names}  # type: ignore[index]
    agent.kill()
    kube.kubectl("delete", "pod", "k0", "-n", kube.namespace, "--wait=false")
    time.sleep(1)
    agent.start()
    wait_for("deleted while down: gone", lambda: kube.get("pod", "k0") is None, timeout=60)
    kube.create(sim_pod("k5", agent.node_name))
    wait_for("new pod Running", lambda: kube.phase("k5") == "Running")
    records = {p.stem for p in (agent.state_dir / "sim").glob("*.json")}
    live = {kube.get("pod", n)["metadata"]["uid"] for n in [*names[1:], "k5"]}  # type: ignore[index]
    assert records == live
    assert live - {kube.get("pod", "k5")["metadata"]["uid"]} <= uids  # type: ignore[index]
    assert all(kube.phase(n) == "Running" for n in names[1:])


def test_orphans_in_the_backend_are_removed_at_start(kube: Kube, start_agent: StartAgent) -> None:
    agent = start_agent()
    kube.create(sim_pod("keep", agent.node_name))
    wait_for("Running", lambda: kube.phase("keep") == "Running")
    agent.signal(signal.SIGTERM)
    orphan = agent.state_dir / "sim" / "orphan-uid.json"
    record = json.loads(next((agent.state_dir / "sim").glob("*.json")).read_text())
    orphan.write_text(json.dumps({**record, "uid": "orphan-uid", "name": "ghost"}))
    agent.start()
    wait_for("orphan removed", lambda: not orphan.exists(), timeout=30)
    assert kube.phase("keep") == "Running"


def test_invalid_pod_gets_reason_and_event_while_others_run(
    kube: Kube, start_agent: StartAgent, tmp_path: Path
) -> None:
    agent = start_agent()
    kube.create(sim_pod("broken", agent.node_name, {"sim.vkpy.io/exit-code": "three"}))
    kube.create(sim_pod("fine", agent.node_name))
    broken = cannot_start(kube, "broken")  # Pending, never Failed (issue 31)
    assert broken["reason"] == "CreateContainerError"
    assert broken["message"].startswith("InvalidSimAnnotation: ")
    assert "not a number" in broken["message"]
    wait_for("other pod Running", lambda: kube.phase("fine") == "Running")
    assert agent.alive()


def test_active_deadline_fails_the_pod(kube: Kube, start_agent: StartAgent) -> None:
    agent = start_agent()
    kube.create(sim_pod("deadline", agent.node_name, activeDeadlineSeconds=3))
    wait_for("Running", lambda: kube.phase("deadline") == "Running")
    failed = wait_for(
        "DeadlineExceeded",
        lambda: kube.phase("deadline") == "Failed" and kube.get("pod", "deadline"),
        timeout=30,
    )
    assert failed["status"]["reason"] == "DeadlineExceeded"
    assert not list((agent.state_dir / "sim").glob("*.json"))


def test_prometheus_metrics_count_pod_operations(kube: Kube, start_agent: StartAgent) -> None:
    port = free_port()
    agent = start_agent(args=[f"--metrics-port={port}"])
    kube.create(sim_pod("counted", agent.node_name))
    wait_for("Running", lambda: kube.phase("counted") == "Running")

    def samples() -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as reply:
            text = reply.read().decode()
        return {
            (s.name, tuple(sorted(s.labels.items()))): s.value
            for family in text_string_to_metric_families(text)
            for s in family.samples
        }

    got = wait_for(
        "a written status in the metrics",
        lambda: (
            (m := samples())
            and m.get(("vkpy_pod_status_updates_total", (("outcome", "written"),)), 0) >= 1
            and m
        ),
    )
    assert got[("vkpy_pod_operations_total", (("operation", "create"), ("outcome", "ok")))] >= 1
    assert got[("vkpy_pod_operation_duration_seconds_count", (("operation", "create"),))] >= 1
    assert any(name == "vkpy_api_requests_total" and value > 0 for (name, _), value in got.items())
    assert ("vkpy_pod_queue_depth", ()) in got
    assert got[("vkpy_pods", ())] >= 1
