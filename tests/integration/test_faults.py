"""The fault suite: a few hundred pods ride out the faults a real node meets.

One module-scoped fleet (a sim node with FLEET pods and a process node with a few
real host processes, on the session's dev cluster) goes through, in order:

1. vkpy SIGKILLed in the middle of a burst of creations, then started again;
2. the backend failing a third of its calls while pods are created and deleted;
3. the API server killed and started again three times, once for longer than the
   node-monitor grace period (the node lifecycle controller then marks the node
   NotReady and every pod Ready=False, which vkpy must undo).

After each, within the bound stated in the test, every pod is Running and Ready (the
Ready condition, as a Service sees it) with its UID, restart count and backend
identity (containerID and start time) unchanged, and the backend holds exactly the
pods the API server has on the node: nothing duplicated, nothing orphaned. The
recovery times are printed (docs/benchmarks.md has the figures).
"""

from __future__ import annotations

import json
import secrets
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.integration.agent import Agent, Kube, sim_pod
from tests.integration.process_fixtures import FAST, kill_containers, process_pod
from tests.namespaces import create_namespace
from vkpy.devcluster import DevCluster

FLEET = 300
"""Sim pods running through every fault."""
PROCESS_PODS = 3
"""Real host processes (the process backend) running through the API server outages."""
BURST = 100
"""Pods created while vkpy is SIGKILLed."""
RECOVERY_BOUND = 120.0
"""Seconds from the end of a fault until every pod is Running and Ready again."""
STABLE = 15.0
"""After an API server outage, everything must stay Ready this long to count as
recovered (the node lifecycle controller acts a few seconds after the server is back)."""
SHORT_OUTAGE = 5.0
LONG_OUTAGE_MARGIN = 10.0
"""The long outage lasts the node-monitor grace period plus this."""

Pod = dict[str, Any]
Identity = tuple[str, int, str, str]


@dataclass
class Fleet:
    cluster: DevCluster
    kube: Kube
    sim: Agent
    process: Agent
    sim_config: Path

    def pods(self) -> list[Pod]:
        return self.kube.list("pod")

    def on(self, node: str, pods: list[Pod]) -> list[Pod]:
        return [p for p in pods if p["spec"].get("nodeName") == node]

    def sim_records(self) -> set[str]:
        """UIDs of the pods the sim backend holds (one record file per pod)."""
        return {p.stem for p in (self.sim.state_dir / "sim").glob("*.json")}

    def process_pod_dirs(self) -> set[str]:
        return {p.name for p in (self.process.state_dir / "process" / "pods").iterdir()}

    def restart_sim(self, **config: Any) -> None:
        self.sim.stop()
        self.sim_config.write_text(yaml.safe_dump({"start_seconds": 0.5, **config}))
        self.sim.start()


def ready(pod: Pod) -> bool:
    status = pod.get("status", {})
    conditions = {c["type"]: c["status"] for c in status.get("conditions", [])}
    containers = status.get("containerStatuses", [])
    return (
        status.get("phase") == "Running"
        and conditions.get("Ready") == "True"
        and bool(containers)
        and all(c.get("ready") and "running" in c.get("state", {}) for c in containers)
    )


def identity(pod: Pod) -> Identity:
    (container,) = pod["status"]["containerStatuses"]
    return (
        pod["metadata"]["uid"],
        int(container["restartCount"]),
        str(container.get("containerID")),
        str(container["state"]["running"]["startedAt"]),
    )


def identities(pods: list[Pod]) -> dict[str, Identity]:
    return {p["metadata"]["name"]: identity(p) for p in pods}


def node_ready(fleet: Fleet, node: str) -> bool:
    obj = fleet.kube.get("node", node, namespaced=False) or {}
    conditions = {c["type"]: c["status"] for c in obj.get("status", {}).get("conditions", [])}
    return conditions.get("Ready") == "True"


def wait_all_ready(
    fleet: Fleet, expected: int, bound: float, what: str, stable: float = 0.0
) -> tuple[float, bool]:
    """Seconds until `expected` pods are all Running and Ready and both nodes Ready, and
    stay so for `stable` s (fail if that has not happened `bound` s from now); and
    whether anything was seen not Ready on the way.

    `stable` covers the node lifecycle controller, which acts on a node some seconds
    after the API server is back, so "all Ready" right then proves nothing."""
    began = time.monotonic()
    seen_unready = False
    good_since: float | None = None
    last: list[Pod] = []
    while time.monotonic() - began < bound + stable:
        last = fleet.pods()
        unready = [p for p in last if not ready(p)]
        nodes = all(node_ready(fleet, a.node_name) for a in (fleet.sim, fleet.process))
        good = len(last) == expected and not unready and nodes
        seen_unready = seen_unready or not good
        now = time.monotonic()
        if not good:
            good_since = None
        elif good_since is None:
            good_since = now
        if good_since is not None and now - good_since >= stable:
            return good_since - began, seen_unready
        if good_since is None and now - began > bound:
            break
        time.sleep(1.0)
    unready = [p["metadata"]["name"] for p in last if not ready(p)]
    sample = [p.get("status", {}) for p in last if not ready(p)][:2]
    raise AssertionError(
        f"{what}: after {bound:g} s, {len(unready)} of {len(last)} pods (want {expected}) "
        f"not Running and Ready, e.g. {unready[:5]}: {json.dumps(sample)[:2000]}"
    )


def assert_backend_matches(fleet: Fleet) -> None:
    pods = fleet.pods()
    sim_uids = {p["metadata"]["uid"] for p in fleet.on(fleet.sim.node_name, pods)}
    assert fleet.sim_records() == sim_uids, "sim backend: duplicated or orphaned pods"
    process_uids = {p["metadata"]["uid"] for p in fleet.on(fleet.process.node_name, pods)}
    assert fleet.process_pod_dirs() == process_uids, "process backend: orphaned pods"


def report(line: str, capsys: pytest.CaptureFixture[str]) -> None:
    with capsys.disabled():
        print(f"\n[faults] {line}", flush=True)


def create_many(kube: Kube, pods: list[Pod]) -> subprocess.Popen[str]:
    """Start creating `pods` in one kubectl (one POST each, in order); not waited for."""
    manifest = json.dumps({"apiVersion": "v1", "kind": "List", "items": pods})
    argv = kube.cluster.kubectl_argv("create", "-n", kube.namespace, "-f", "-", "-o", "name")
    process = subprocess.Popen(
        argv, stdin=subprocess.PIPE, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True
    )
    assert process.stdin is not None
    process.stdin.write(manifest)
    process.stdin.close()
    return process


def finished(process: subprocess.Popen[str]) -> None:
    assert process.wait(timeout=300) == 0, process.stderr.read() if process.stderr else ""


@pytest.fixture(scope="module")
def fleet(local_cluster: DevCluster, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Fleet]:
    access = local_cluster.access()
    tmp = tmp_path_factory.mktemp("faults")
    namespace = f"vkpy-faults-{secrets.token_hex(3)}"
    create_namespace(access.run_kubectl, namespace)
    kube = Kube(access, namespace)
    agents: list[Agent] = []

    def agent(provider: str, config: dict[str, Any]) -> Agent:
        name = f"vk-faults-{provider}-{secrets.token_hex(2)}"
        (tmp / name).mkdir()
        config_path = tmp / name / "provider.yaml"
        config_path.write_text(yaml.safe_dump(config))
        started = Agent(
            cluster=access,
            node_name=name,
            state_dir=tmp / name / "state",
            log_path=tmp / f"{name}.log",
            provider=provider,
            provider_config=config_path,
        ).start()
        agents.append(started)
        return started

    sim = agent("sim", {"start_seconds": 0.5})
    process = agent("process", dict(FAST))
    assert sim.provider_config is not None
    fleet = Fleet(local_cluster, kube, sim, process, sim.provider_config)
    try:
        pods = [sim_pod(f"fleet-{i:03d}", sim.node_name) for i in range(FLEET)]
        pods += [
            process_pod(f"proc-{i}", process.node_name, "sleep 3600") for i in range(PROCESS_PODS)
        ]
        finished(create_many(kube, pods))
        wait_all_ready(fleet, FLEET + PROCESS_PODS, 300, "the fleet starting")
        yield fleet
    finally:
        for started in agents:
            if started.alive():
                started.stop()
        kill_containers(process.state_dir / "process" / "pods")
        access.run_kubectl("delete", "namespace", namespace, "--wait=false", check=False)
        for started in agents:
            access.run_kubectl("delete", "node", started.node_name, "--wait=false", check=False)
            print(f"--- log of {started.node_name} ---\n{started.logs()[-20000:]}")


def test_vkpy_sigkilled_in_a_burst_of_creations(
    fleet: Fleet, capsys: pytest.CaptureFixture[str]
) -> None:
    before = identities(fleet.pods())
    burst = [sim_pod(f"burst-{i:03d}", fleet.sim.node_name) for i in range(BURST)]
    creating = create_many(fleet.kube, burst)
    began = time.monotonic()
    while True:  # kill once a part of the burst runs and the rest is still coming
        running = [p for p in fleet.pods() if p["metadata"]["name"].startswith("burst-")]
        if sum(map(ready, running)) >= BURST // 5:
            break
        assert time.monotonic() - began < 120, "the burst never started running"
        time.sleep(0.2)
    fleet.sim.kill()
    killed_at = time.monotonic()
    created_before_kill = len(running)
    early = {p["metadata"]["name"]: identity(p) for p in running if ready(p)}
    fleet.sim.start()
    finished(creating)
    took, _ = wait_all_ready(fleet, FLEET + PROCESS_PODS + BURST, RECOVERY_BOUND, "after SIGKILL")
    report(
        f"SIGKILL after {created_before_kill} of {BURST} burst pods existed "
        f"({len(early)} Ready): all {FLEET + PROCESS_PODS + BURST} pods Ready "
        f"{time.monotonic() - killed_at:.1f} s after the kill ({took:.1f} s of waiting)",
        capsys,
    )
    after = identities(fleet.pods())
    assert {name: after[name] for name in before} == before
    assert {name: after[name] for name in early} == early
    assert all(after[f"burst-{i:03d}"][1] == 0 for i in range(BURST)), "a burst pod restarted"
    assert_backend_matches(fleet)


def test_backend_failing_a_third_of_its_calls(
    fleet: Fleet, capsys: pytest.CaptureFixture[str]
) -> None:
    fleet.restart_sim(failure_rate=0.33)
    try:
        pods = fleet.pods()
        before = identities(pods)
        doomed = sorted(n for n in before if n.startswith("burst-"))[: BURST // 2]
        began = time.monotonic()
        fresh = [sim_pod(f"flaky-{i:03d}", fleet.sim.node_name) for i in range(BURST // 2)]
        creating = create_many(fleet.kube, fresh)
        fleet.kube.kubectl("delete", "pod", "-n", fleet.kube.namespace, "--wait=false", *doomed)
        finished(creating)
        wait_all_ready(
            fleet, len(pods) - len(doomed) + len(fresh), RECOVERY_BOUND, "with a flaky backend"
        )
        report(
            f"backend failing 1/3 of calls: {len(fresh)} created and {len(doomed)} deleted, "
            f"all Ready in {time.monotonic() - began:.1f} s",
            capsys,
        )
        after = identities(fleet.pods())
        assert not set(doomed) & set(after)
        kept = {n: v for n, v in before.items() if n not in doomed}
        assert {n: after[n] for n in kept} == kept
        deadline = time.monotonic() + 60
        while fleet.sim_records() != {
            p["metadata"]["uid"] for p in fleet.on(fleet.sim.node_name, fleet.pods())
        }:
            assert time.monotonic() < deadline, "deleted pods left behind in the backend"
            time.sleep(0.5)
        assert_backend_matches(fleet)
    finally:
        fleet.restart_sim(failure_rate=0.0)
    wait_all_ready(fleet, len(fleet.pods()), RECOVERY_BOUND, "after the flaky backend healed")


def test_api_server_killed_and_restarted_three_times(
    fleet: Fleet, capsys: pytest.CaptureFixture[str]
) -> None:
    grace = float(fleet.cluster.settings.node_monitor_grace_period.removesuffix("s"))
    pods = fleet.pods()
    before = identities(pods)
    total = len(pods)
    for number, outage in enumerate(
        (SHORT_OUTAGE, grace + LONG_OUTAGE_MARGIN, SHORT_OUTAGE), start=1
    ):
        fleet.cluster.kill_component("kube-apiserver")
        time.sleep(outage)  # the outage itself: nothing to wait for
        fleet.cluster.restart_component("kube-apiserver")
        took, dipped = wait_all_ready(
            fleet, total, RECOVERY_BOUND, f"API server outage {number} ({outage:g} s)", STABLE
        )
        report(
            f"API server outage {number} of {outage:g} s (node-monitor grace {grace:g} s): "
            f"all {total} pods and both nodes Ready {took:.1f} s after it was back (and "
            f"for {STABLE:g} s after); anything seen not Ready on the way: "
            f"{'yes' if dipped else 'no'}",
            capsys,
        )
        assert identities(fleet.pods()) == before
        assert_backend_matches(fleet)
    # The rest of the cluster came back too: the controller-manager (whose informers
    # wait out client-go's back-off after an outage) prepares a new namespace again.
    fresh = create_namespace(fleet.kube.cluster.run_kubectl, f"vkpy-after-{secrets.token_hex(3)}")
    fleet.kube.cluster.run_kubectl("delete", "namespace", fresh, "--wait=false")
