"""Hybrid node pools end to end: a regular pool of workers plus virtual nodes, with
the real scheduler, the real HPA and controllers, and metrics-server.

One set of nodes for the whole module (two 2-CPU workers, the second advertising a
GPU; the process-backed virtual node vkpy-virtual with --pod-deletion-cost; the
simulated GPU node vkpy-gpu) on the session's control plane; the scenarios run one
after the other on it, each cleaning up what it placed, and the last one stops the
pools and checks that nothing of them is left running. Timings are printed (run with
`-s` to see them); docs/hybrid-node-pools.md quotes them.
"""

# ruff: noqa: F811 - pytest fixtures are imported by name and then requested as arguments

from __future__ import annotations

import json
import secrets
import shutil
import subprocess
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.integration.aci_fixtures import AciSetup, aci, aci_emulator  # noqa: F401
from tests.integration.agent import wait_for
from tests.integration.conftest import StartAgent
from tests.namespaces import create_namespace
from tests.processes import processes_under
from vkpy.devcluster import DevCluster, hybrid_demo, processes
from vkpy.devcluster import nodes as pools
from vkpy.devcluster.binaries import tool_dir
from vkpy.devcluster.load import QueueLoad, new_queue_dir, with_queue

EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "hybrid"
WORKERS = ("vkpy-worker-1", "vkpy-worker-2")
VIRTUAL, GPU_NODE = "vkpy-virtual", "vkpy-gpu"
SLOW = 300.0  # generous: the machine is shared, the HPA syncs every 15 s
pytestmark = pytest.mark.timeout(900)


@dataclass
class Hybrid:
    cluster: DevCluster
    ns: str
    queue: Path

    def kubectl(self, *args: str, input: str | None = None, check: bool = True) -> str:
        return self.cluster.access().run_kubectl(*args, input=input, check=check).stdout

    def apply(self, docs: list[dict[str, Any]]) -> None:
        self.kubectl("apply", "-n", self.ns, "-f", "-", input=yaml.safe_dump_all(docs))

    def pods(self, selector: str) -> list[dict[str, Any]]:
        out = self.kubectl("get", "pods", "-n", self.ns, "-l", selector, "-o", "json")
        items: list[dict[str, Any]] = json.loads(out)["items"]
        return items

    def get(self, kind: str, name: str) -> dict[str, Any]:
        out = self.kubectl("get", kind, name, "-n", self.ns, "-o", "json")
        loaded: dict[str, Any] = json.loads(out)
        return loaded

    def delete_and_wait(self, *objects: str, selector: str) -> None:
        self.kubectl("delete", "-n", self.ns, *objects, "--ignore-not-found", "--wait=false")
        wait_for(f"pods {selector} gone", lambda: not self.pods(selector), timeout=120)


def wait_placement(hybrid: Hybrid, selector: str, expected: dict[str, int], what: str) -> None:
    """Wait until the Ready, not terminating pods of `selector` are spread as `expected`."""
    deadline = time.monotonic() + SLOW
    while True:
        pods = live(hybrid.pods(selector))
        counts = by_node([p for p in pods if ready(p)])
        if counts == expected:
            return
        if time.monotonic() > deadline:
            states = {p["metadata"]["name"]: (node_of(p), p["status"].get("phase")) for p in pods}
            raise AssertionError(f"{what}: still {counts} after {SLOW:g} s; pods {states}")
        time.sleep(0.5)


def example(name: str, queue: Path | None = None) -> list[dict[str, Any]]:
    text = (EXAMPLES / name).read_text()
    if queue is not None:
        text = with_queue(text, queue)
    return [d for d in yaml.safe_load_all(text) if d]


def ready(pod: dict[str, Any]) -> bool:
    conditions = pod.get("status", {}).get("conditions", [])
    return any(c["type"] == "Ready" and c["status"] == "True" for c in conditions)


def live(pods: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [p for p in pods if not p["metadata"].get("deletionTimestamp")]


def node_of(pod: dict[str, Any]) -> str:
    return str(pod.get("spec", {}).get("nodeName") or "")


def by_node(pods: list[dict[str, Any]]) -> dict[str, int]:
    counts: dict[str, int] = {}
    for pod in pods:
        counts[node_of(pod)] = counts.get(node_of(pod), 0) + 1
    return counts


@pytest.fixture(scope="module")
def hybrid(local_cluster: DevCluster) -> Iterator[Hybrid]:
    cluster = local_cluster
    cluster.start_metrics_server()
    specs = [
        pools.worker(1),
        pools.worker(2, gpus=1),
        pools.virtual(pod_deletion_cost=-100),
        pools.gpu_virtual(),
    ]
    ns = f"vkpy-hybrid-{secrets.token_hex(3)}"
    queue = new_queue_dir()
    setup = Hybrid(cluster, ns, queue)
    try:
        # The workers run images (runtime: oci as root): the examples' python:3.12-slim
        # and the tests' `python` from the dev registry (docs/devcluster-images.md).
        cluster.start_registry(["python"])
        cluster.start_nodes(specs)
        create_namespace(cluster.access().run_kubectl, ns)
        setup.kubectl("apply", "-f", str(EXAMPLES / "priority-classes.yaml"))
        # Created first, so its minute comes while the other scenarios run.
        setup.apply([d for d in example("batch.yaml") if d["kind"] == "CronJob"])
        yield setup
    finally:
        setup.kubectl("delete", "namespace", ns, "--wait=false", check=False)
        cluster.extras().stop_all(api_up=True)
        setup.kubectl("delete", "-f", str(EXAMPLES / "priority-classes.yaml"), check=False)
        shutil.rmtree(queue, ignore_errors=True)


def _top(hybrid: Hybrid, *args: str) -> dict[str, int]:
    """`kubectl top ...` as {name: CPU millicores}; {} while metrics are missing."""
    got = hybrid.cluster.access().run_kubectl("top", *args, "--no-headers", check=False)
    if got.returncode != 0:
        return {}
    table: dict[str, int] = {}
    for line in got.stdout.splitlines():
        fields = line.split()
        if len(fields) >= 2 and fields[1].endswith("m"):
            table[fields[0]] = int(fields[1][:-1])
    return table


def test_top_lists_every_node_and_pod(hybrid: Hybrid) -> None:
    burn = (
        "import time\n"
        "while True:\n"
        "    end = time.process_time() + 0.03\n"
        "    while time.process_time() < end: pass\n"
        "    time.sleep(0.07)"
    )
    idle = "import time; time.sleep(1e9)"
    placed = {
        "idle-w1": (WORKERS[0], idle),
        "burn-w1": (WORKERS[0], burn),
        "idle-w2": (WORKERS[1], idle),
        "idle-virtual": (VIRTUAL, idle),
        "idle-gpu": (GPU_NODE, idle),
    }
    hybrid.apply(
        [
            {
                "apiVersion": "v1",
                "kind": "Pod",
                "metadata": {"name": name, "labels": {"app": "top"}},
                "spec": {
                    "nodeName": node,
                    "terminationGracePeriodSeconds": 1,
                    "containers": [
                        {"name": "c", "image": "python", "command": ["python3", "-c", code]}
                    ],
                },
            }
            for name, (node, code) in placed.items()
        ]
    )
    wait_for(
        "the pods Running",
        lambda: len([p for p in hybrid.pods("app=top") if ready(p)]) == 5,
        timeout=120,
    )

    nodes = wait_for(
        "kubectl top node to list every node, the burning pod's above the other worker",
        lambda: (
            (t := _top(hybrid, "node"))
            and all(n in t for n in [*WORKERS, VIRTUAL, GPU_NODE])
            and t[WORKERS[0]] > t[WORKERS[1]] + 20
            and t
        ),
        timeout=SLOW,
    )
    pods = wait_for(
        "kubectl top pod to list every pod, the burning one above the idle ones",
        lambda: (
            (t := _top(hybrid, "pod", "-n", hybrid.ns))
            and set(placed) <= set(t)
            and t["burn-w1"] > max(t["idle-w1"], t["idle-w2"], t["idle-virtual"]) + 20
            and t
        ),
        timeout=SLOW,
    )
    print(f"\nkubectl top node: {nodes}\nkubectl top pod: {pods}")
    hybrid.delete_and_wait("pods", "-l", "app=top", selector="app=top")


def _node(hybrid: Hybrid, name: str) -> dict[str, Any]:
    out = hybrid.kubectl("get", "node", name, "-o", "json", check=False)
    node: dict[str, Any] = json.loads(out) if out else {}
    return node


def test_metrics_server_checks_kubelet_certificates_against_the_kubelet_ca(
    hybrid: Hybrid, start_agent: StartAgent
) -> None:
    """Not `--kubelet-insecure-tls`: a node serving vkpy's self-signed certificate (its
    default without one) is refused by metrics-server and missing from `kubectl top
    node`, while the nodes with certificates from the kubelet signing CA are there."""
    rogue = start_agent(provider="sim")
    wait_for(f"node {rogue.node_name} Ready", lambda: ready(_node(hybrid, rogue.node_name)))
    log = hybrid.cluster.logs_dir / "metrics-server.log"
    refused = wait_for(
        f"metrics-server to refuse {rogue.node_name}'s certificate",
        lambda: [
            line
            for line in log.read_text(errors="replace").splitlines()
            if rogue.node_name in line and "x509: certificate signed by unknown authority" in line
        ],
        timeout=SLOW,
    )
    print(f"\nmetrics-server: {refused[0][:300]}")
    top = wait_for(
        "kubectl top node to list the workers", lambda: (t := _top(hybrid, "node")) and
        set(WORKERS) <= set(t) and t, timeout=SLOW,
    )  # fmt: skip
    assert rogue.node_name not in top, top


def _placed_when_virtual_ready(pods: list[dict[str, Any]]) -> dict[str, int]:
    """Where the live pods are bound once one of them is Ready on the virtual node."""
    if any(ready(p) and node_of(p) == VIRTUAL for p in pods):
        return by_node(live(pods))
    return {}


def test_burst_overflows_to_virtual_and_scales_in_from_it(hybrid: Hybrid) -> None:
    hybrid.apply(example("burst.yaml", hybrid.queue))
    wait_for(
        "the baseline of 2 on the regular pool",
        lambda: (
            len(ps := [p for p in hybrid.pods("app=burst") if ready(p)]) == 2
            and all(node_of(p) in WORKERS for p in ps)
        ),
        timeout=120,
    )
    load = QueueLoad(hybrid.queue, cores=0.45).start()
    began = time.monotonic()
    try:
        at_first_virtual = wait_for(
            "a burst replica Ready on the virtual node",
            lambda: load.check() and _placed_when_virtual_ready(hybrid.pods("app=burst")),
            timeout=SLOW,
        )
        first_virtual = time.monotonic() - began
        # By then the regular pool was full: 2 replicas (700m) bound to each 2-CPU worker.
        assert all(at_first_virtual.get(w) == 2 for w in WORKERS), at_first_virtual
        peak = wait_for(
            "the HPA to scale out to at least 6 Ready replicas",
            lambda: (
                load.check()
                and len(ps := [p for p in live(hybrid.pods("app=burst")) if ready(p)]) >= 6
                and ps
            ),
            timeout=SLOW,
        )
        scaled_out = time.monotonic() - began
        # What `make demo`'s live table shows at the peak: the full pool, the virtual
        # replicas, the HPA's CPU figure against its 10% target.
        shown = wait_for(
            "the demo's table row at the peak",
            lambda: (
                (r := hybrid_demo.sample(hybrid.cluster.access(), 0, 0.45, hybrid.ns))
                and r.regular == 4
                and r.virtual >= 2
                and r.desired >= 6
                and r.cpu_percent >= 0
                and r.target_percent == 10
                and r
            ),
            timeout=60,
        )
    finally:
        load.stop()
    counts = by_node(peak)
    # The virtual node only took what the full regular pool could not: 2 per worker.
    assert counts.get(VIRTUAL, 0) >= 2, counts
    assert all(counts.get(w) == 2 for w in WORKERS), counts
    regular_at_peak = {p["metadata"]["name"] for p in peak if node_of(p) in WORKERS}

    stopped = time.monotonic()
    removed_regular_first: list[str] = []

    def scaled_in() -> bool:
        now = live(hybrid.pods("app=burst"))
        names = {p["metadata"]["name"] for p in now}
        if (regular_at_peak - names) and any(node_of(p) == VIRTUAL for p in now):
            removed_regular_first.append(f"{sorted(regular_at_peak - names)} while {by_node(now)}")
        return len(now) == 2

    wait_for("the HPA to scale back in to 2", scaled_in, timeout=SLOW)
    scaled_back = time.monotonic() - stopped
    final = live(hybrid.pods("app=burst"))
    assert not removed_regular_first, removed_regular_first
    assert all(node_of(p) in WORKERS for p in final), by_node(final)
    annotations = [p["metadata"].get("annotations", {}) for p in peak if node_of(p) == VIRTUAL]
    assert all(a.get("controller.kubernetes.io/pod-deletion-cost") == "-100" for a in annotations)
    print(
        f"\nburst: load start -> first virtual replica Ready {first_virtual:.1f} s; "
        f"-> {len(peak)} Ready {scaled_out:.1f} s (per node {counts}); "
        f"load end -> back to 2 on the regular pool {scaled_back:.1f} s\n"
        f"demo row at the peak:\n{hybrid_demo.HEADER}\n{hybrid_demo.row(shown)}"
    )
    hybrid.delete_and_wait("deployment/burst", "hpa/burst", selector="app=burst")


def _ranked(name: str, worker: str, cost: str | None) -> dict[str, Any]:
    """A Deployment allowed only on `worker` and the virtual node, preferring the
    worker; 450m each, so the worker holds 4. `cost` is set in its pod template (a
    value of the owner's, which vkpy keeps)."""
    annotations = {} if cost is None else {"controller.kubernetes.io/pod-deletion-cost": cost}
    only = {"key": "kubernetes.io/hostname", "operator": "In", "values": [worker, VIRTUAL]}
    regular = {"key": pools.POOL_LABEL, "operator": "In", "values": ["regular"]}
    affinity = {
        "requiredDuringSchedulingIgnoredDuringExecution": {
            "nodeSelectorTerms": [{"matchExpressions": [only]}]
        },
        "preferredDuringSchedulingIgnoredDuringExecution": [
            {"weight": 100, "preference": {"matchExpressions": [regular]}}
        ],
    }
    # Replaces the scheduler's default spread over hostnames (docs: topology spread).
    spread = {
        "maxSkew": 1,
        "topologyKey": pools.ZONE_LABEL,
        "whenUnsatisfiable": "ScheduleAnyway",
        "labelSelector": {"matchLabels": {"app": name}},
    }
    toleration = {
        "key": "virtual-kubelet.io/provider",
        "operator": "Equal",
        "value": "process",
        "effect": "NoSchedule",
    }
    container = {
        "name": "c",
        "image": "python",
        "command": ["python3", "-c", "import time; time.sleep(1e9)"],
        "resources": {"requests": {"cpu": "450m", "memory": "32Mi"}},
    }
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": name},
        "spec": {
            "replicas": 4,
            "selector": {"matchLabels": {"app": name}},
            "template": {
                "metadata": {"labels": {"app": name, "rank": "yes"}, "annotations": annotations},
                "spec": {
                    "terminationGracePeriodSeconds": 1,
                    "affinity": {"nodeAffinity": affinity},
                    "topologySpreadConstraints": [spread],
                    "tolerations": [toleration],
                    "containers": [container],
                },
            },
        },
    }


def _wait_live(hybrid: Hybrid, selector: str, count: int) -> None:
    wait_for(
        f"{count} pods {selector} not terminating",
        lambda: len(live(hybrid.pods(selector))) == count,
        timeout=120,
    )


def test_scale_in_ranking_takes_the_virtual_replicas_first_only_with_the_cost(
    hybrid: Hybrid,
) -> None:
    """The ReplicaSet controller's own ranking: a worker holding 4 replicas loses its
    pods before the virtual node holding 2 (more co-located replicas go first). With
    vkpy's --pod-deletion-cost on the virtual node, the virtual replicas go first."""
    plain, costed = "rank-plain", "rank-cost"
    # rank-plain's owner sets the default cost itself (0), so vkpy writes none.
    hybrid.apply([_ranked(plain, WORKERS[0], "0"), _ranked(costed, WORKERS[1], None)])
    for name, worker in ((plain, WORKERS[0]), (costed, WORKERS[1])):
        wait_placement(hybrid, f"app={name}", {worker: 4}, f"{name}: 4 on {worker}")
    both = (f"deployment/{plain}", f"deployment/{costed}")
    hybrid.kubectl("scale", "-n", hybrid.ns, *both, "--replicas=6")
    for name, worker in ((plain, WORKERS[0]), (costed, WORKERS[1])):
        wait_placement(
            hybrid, f"app={name}", {worker: 4, VIRTUAL: 2}, f"{name}: worker full, 2 virtual"
        )
    virtual_costs = {
        name: {
            p["metadata"].get("annotations", {}).get("controller.kubernetes.io/pod-deletion-cost")
            for p in hybrid.pods(f"app={name}")
            if node_of(p) == VIRTUAL
        }
        for name in (plain, costed)
    }
    assert virtual_costs == {plain: {"0"}, costed: {"-100"}}

    hybrid.kubectl("scale", "-n", hybrid.ns, *both, "--replicas=4")
    for name in (plain, costed):
        _wait_live(hybrid, f"app={name}", 4)
    left = {name: by_node(live(hybrid.pods(f"app={name}"))) for name in (plain, costed)}
    assert left == {plain: {WORKERS[0]: 2, VIRTUAL: 2}, costed: {WORKERS[1]: 4}}
    hybrid.delete_and_wait(*both, selector="rank=yes")


def test_spot_drain_moves_replicas_to_virtual_and_back(hybrid: Hybrid) -> None:
    hybrid.apply(example("spot.yaml"))
    wait_placement(
        hybrid, "app=steady", {WORKERS[0]: 2, WORKERS[1]: 2}, "4 steady replicas, 2 on each worker"
    )
    with ReadyLow(hybrid, "app=steady") as serving:
        began = time.monotonic()
        drain = hybrid.cluster.access().run_kubectl(
            "drain", WORKERS[0], "--ignore-daemonsets", "--delete-emptydir-data",
            "--timeout=240s", timeout=260,
        )  # fmt: skip
        assert drain.returncode == 0, drain.stderr
        wait_placement(
            hybrid,
            "app=steady",
            {WORKERS[1]: 2, VIRTUAL: 2},
            "4 Ready again: 2 on the other worker, 2 on the virtual node",
        )
        moved = time.monotonic() - began
    # No replica lost: never fewer than the budget's 3 Ready (not terminating) while
    # the drain evicted them one by one, and all 4 Ready at the end.
    assert serving.samples > 0
    assert serving.lowest >= 3, serving.lowest
    pdb = hybrid.get("pdb", "steady")
    assert pdb["status"]["currentHealthy"] == 4

    # The descheduler with examples/hybrid/descheduler-policy.yaml while the drained
    # worker is still cordoned: the virtual replicas fit on no other node, so it evicts
    # nothing (no churn between a full pool and the virtual node).
    before = {p["metadata"]["name"]: node_of(p) for p in live(hybrid.pods("app=steady"))}
    deschedule(hybrid)
    after = {p["metadata"]["name"]: node_of(p) for p in live(hybrid.pods("app=steady"))}
    assert after == before

    hybrid.kubectl("uncordon", WORKERS[0])
    back = time.monotonic()
    wait_for(
        f"{WORKERS[0]} schedulable again (no unschedulable taint)",
        lambda: not hybrid.get("node", WORKERS[0])["spec"].get("taints"),
        timeout=SLOW,
    )
    # The pool has recovered: passes of the descheduler (what it does on each interval
    # when deployed) until the replicas are back; the budget lets one move per pass.
    passes = 0
    with ReadyLow(hybrid, "app=steady") as returning:
        while by_node(live(hybrid.pods("app=steady"))) != {WORKERS[0]: 2, WORKERS[1]: 2}:
            assert passes < 6, f"{passes} descheduler passes: {hybrid.pods('app=steady')}"
            deschedule(hybrid)
            passes += 1
            wait_for(
                "4 Ready replicas and none terminating after a descheduler pass",
                lambda: all_ready(hybrid.pods("app=steady"), 4),
                timeout=SLOW,
            )
        moved_back = time.monotonic() - back
    assert all_ready(hybrid.pods("app=steady"), 4)
    assert by_node(hybrid.pods("app=steady")) == {WORKERS[0]: 2, WORKERS[1]: 2}
    assert returning.lowest >= 3, returning.lowest
    print(
        f"\nspot: drain -> 4 Ready with 2 on the virtual node {moved:.1f} s "
        f"(fewest Ready meanwhile {serving.lowest}, {serving.samples} samples); "
        f"uncordon -> back on the regular pool {moved_back:.1f} s with {passes} "
        f"descheduler passes (fewest Ready meanwhile {returning.lowest})"
    )
    hybrid.delete_and_wait("deployment/steady", "pdb/steady", selector="app=steady")


def test_spot_loss_of_a_worker_moves_its_replicas_to_virtual(hybrid: Hybrid) -> None:
    """A Spot VM that vanishes without a drain: its kubelet stops (killed here), the
    node lifecycle controller marks the node unreachable once its Lease runs out, and
    spot.yaml's 10 s tolerations of unreachable/not-ready evict its replicas; their
    replacements start on the virtual node. When the worker comes back, the pods it
    held are finished and gone."""
    hybrid.apply(example("spot.yaml"))
    wait_placement(
        hybrid, "app=steady", {WORKERS[0]: 2, WORKERS[1]: 2}, "4 steady replicas, 2 on each worker"
    )
    record = hybrid.cluster.extras().records.named(WORKERS[0])
    assert record is not None
    began = time.monotonic()
    assert processes.kill([record.process]) == []
    wait_placement(
        hybrid,
        "app=steady",
        {WORKERS[1]: 2, VIRTUAL: 2},
        "4 Ready again without the lost worker: 2 on the other one, 2 on the virtual node",
    )
    moved = time.monotonic() - began
    hybrid.cluster.start_nodes([pools.worker(1)])
    wait_for(
        "the lost worker's pods gone once it is back",
        lambda: not [p for p in hybrid.pods("app=steady") if node_of(p) == WORKERS[0]],
        timeout=120,
    )
    assert by_node(live(hybrid.pods("app=steady"))) == {WORKERS[1]: 2, VIRTUAL: 2}
    print(f"\nspot: worker lost -> 4 Ready with 2 on the virtual node {moved:.1f} s")
    hybrid.delete_and_wait("deployment/steady", "pdb/steady", selector="app=steady")


def all_ready(pods: list[dict[str, Any]], count: int) -> bool:
    """Exactly `count` pods, all Ready, none terminating."""
    return len(pods) == count and len(live(pods)) == count and all(ready(p) for p in pods)


def deschedule(hybrid: Hybrid) -> None:
    """One pass of the real descheduler (interval 0: run once and exit) with the
    example policy, as the cluster's admin, no metrics or health port of its own."""
    run = subprocess.run(
        [
            str(tool_dir("descheduler") / "descheduler"),
            f"--kubeconfig={hybrid.cluster.kubeconfig}",
            f"--policy-config-file={EXAMPLES / 'descheduler-policy.yaml'}",
            "--descheduling-interval=0",
            "--secure-port=0",
            "--v=1",
        ],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert run.returncode == 0, run.stderr
    print("".join(line for line in run.stderr.splitlines(True) if "vict" in line))


class ReadyLow:
    """The fewest Ready, not terminating pods of a selector seen while the block runs
    (sampled in a thread, as fast as kubectl answers)."""

    def __init__(self, hybrid: Hybrid, selector: str) -> None:
        self.hybrid, self.selector = hybrid, selector
        self.lowest, self.samples = 1 << 30, 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._watch, name="ready-low", daemon=True)

    def _watch(self) -> None:
        while not self._stop.is_set():
            count = len([p for p in live(self.hybrid.pods(self.selector)) if ready(p)])
            self.lowest, self.samples = min(self.lowest, count), self.samples + 1
            self._stop.wait(0.2)

    def __enter__(self) -> ReadyLow:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(timeout=30)


SCHEDULED = "batch.kubernetes.io/cronjob-scheduled-timestamp"


def _time(stamp: str) -> datetime:
    return datetime.fromisoformat(stamp)


def _job_done(hybrid: Hybrid, name: str) -> bool:
    job = hybrid.get("job", name)
    conditions = job.get("status", {}).get("conditions", [])
    return any(c["type"] == "Complete" and c["status"] == "True" for c in conditions)


def test_batch_runs_on_the_virtual_pool_with_logs_after_completion(hybrid: Hybrid) -> None:
    hybrid.apply([d for d in example("batch.yaml") if d["kind"] == "Job"])
    wait_for("the Job crunch to complete", lambda: _job_done(hybrid, "crunch"), timeout=SLOW)
    pods = hybrid.pods("app=crunch")
    assert {node_of(p) for p in pods} == {VIRTUAL}
    logs = hybrid.kubectl("logs", "-n", hybrid.ns, "-l", "app=crunch", "--prefix")
    assert logs.count("sum of squares: 2666646666700000") == 3, logs

    def cron_job_done() -> str | None:
        out = hybrid.kubectl("get", "jobs", "-n", hybrid.ns, "-o", "json")
        for job in json.loads(out)["items"]:
            owners = job["metadata"].get("ownerReferences", [])
            if any(o["name"] == "report" for o in owners) and _job_done(
                hybrid, job["metadata"]["name"]
            ):
                return str(job["metadata"]["name"])
        return None

    job = wait_for("a Job of the CronJob report to complete", cron_job_done, timeout=SLOW)
    pods = [p for p in hybrid.pods("app=report") if p["metadata"]["labels"].get("job-name") == job]
    assert pods and {node_of(p) for p in pods} == {VIRTUAL}
    # On schedule ("* * * * *"): made for a whole minute after the CronJob was created,
    # named after that minute, its pod started no earlier.
    scheduled = _time(hybrid.get("job", job)["metadata"]["annotations"][SCHEDULED])
    created = _time(hybrid.get("cronjob", "report")["metadata"]["creationTimestamp"])
    assert scheduled.second == 0 and scheduled > created, (scheduled, created)
    assert job == f"report-{int(scheduled.timestamp()) // 60}"
    assert all(_time(p["status"]["startTime"]) >= scheduled for p in pods)
    assert "report at" in hybrid.kubectl("logs", "-n", hybrid.ns, f"job/{job}")
    hybrid.kubectl("delete", "-n", hybrid.ns, "cronjob/report", "job/crunch", "--wait=false")


def test_gpu_pods_land_where_their_resources_say(hybrid: Hybrid) -> None:
    hybrid.apply(example("gpu.yaml"))
    wait_placement(
        hybrid,
        "app=inference",
        {GPU_NODE: 2},
        "2 inference replicas Running on the GPU virtual node",
    )
    wait_for("the training Job to complete", lambda: _job_done(hybrid, "training"), timeout=120)
    assert {node_of(p) for p in hybrid.pods("app=training")} == {WORKERS[1]}
    hybrid.delete_and_wait(
        "deployment/inference", "job/training", selector="app in (inference,training)"
    )


def test_gpu_inference_lands_on_an_aci_gpu_node(
    hybrid: Hybrid, start_agent: StartAgent, aci: AciSetup
) -> None:
    """The same inference Deployment on an ACI-backed virtual node with GPUs (the ACI
    backend against the emulator), while the sim GPU node is cordoned: each replica's
    container group asks ACI for one GPU of the node's SKU."""
    node = start_agent(
        provider="aci",
        config=aci.config(gpu_capacity=4, gpu_sku="V100"),
        args=["--label=accelerator=nvidia"],
    )
    wait_for(f"node {node.node_name} Ready", lambda: ready(_node(hybrid, node.node_name)))
    docs = [d for d in example("gpu.yaml") if d["kind"] == "Deployment"]
    # The emulator runs commands as processes: something that keeps running.
    (model,) = docs[0]["spec"]["template"]["spec"]["containers"]
    model["command"] = ["sh", "-c", "exec sleep 3600"]
    hybrid.kubectl("cordon", GPU_NODE)
    try:
        hybrid.apply(docs)
        wait_placement(
            hybrid, "app=inference", {node.node_name: 2}, "2 inference replicas on the ACI node"
        )
    finally:
        hybrid.kubectl("uncordon", GPU_NODE)
    groups = [g for (rg, _), g in aci.emulator.store.groups.items() if rg == aci.resource_group]
    asked = [(g.model.containers[0].resources.requests.gpu) for g in groups]
    assert [(a.count, a.sku) for a in asked if a is not None] == [(1, "V100")] * 2, asked
    hybrid.delete_and_wait("deployment/inference", selector="app=inference")


def test_stopping_the_pools_leaves_no_process_behind(hybrid: Hybrid) -> None:
    # Something still running on a worker and on the virtual node when they stop.
    hybrid.apply(example("spot.yaml"))
    wait_for(
        "steady replicas Running",
        lambda: len([p for p in hybrid.pods("app=steady") if ready(p)]) == 4,
        timeout=120,
    )
    directory = hybrid.cluster.dir / "nodes"
    assert processes_under(directory)
    # What `devcluster down` does before it stops the control plane.
    stopped = hybrid.cluster.extras().stop_all(api_up=True)
    assert set(stopped) >= {*WORKERS, VIRTUAL, GPU_NODE, "metrics-server"}
    assert processes_under(directory) == []
    nodes = hybrid.kubectl("get", "nodes", "-o", "name")
    assert not any(n in nodes for n in [*WORKERS, VIRTUAL, GPU_NODE])
