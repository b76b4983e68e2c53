"""`helm install charts/vkpy` for real: vkpy as a Deployment inside the dev cluster.

One dev cluster for the module, started as a user would (`devcluster up --workers 2
--verify-kubelet-certs`): two regular workers (process backend, each with its own
loopback address) and an API server that verifies kubelet serving certificates
against the kubelet-serving CA. The chart is installed with the pinned helm; its pod
is scheduled onto a worker, where the worker's `images` setting runs the chart's
`vkpy` image from this checkout, in a mount namespace of its own: it reads its
ServiceAccount token, provider config and state at the paths a container would, and
reaches the API server in-cluster (KUBERNETES_SERVICE_HOST/PORT from the worker).

The tests run in order on one release, as its life goes:
- install: vkpy runs in-cluster with only its ServiceAccount, gets its serving
  certificate by CSR (approved by the chart's approver), registers its node (sim
  backend, one platform directory the replicas share); a Deployment's pods on the
  virtual node reach Running, and `kubectl logs`/`exec` reach them through the API
  server, which verified vkpy's certificate;
- `helm upgrade` changing a value rolls vkpy's pod without losing the node's pods;
- `replicaCount: 2`: the leader's host dies (SIGKILL of its worker and of the vkpy
  process; a process killed alone is restarted in its pod and keeps the Lease); the
  standby takes over, the Node points at it and is Ready, and the pods keep UIDs,
  restart counts and backend identity (the failover time is printed: docs/deploy.md);
- `helm uninstall`: the node is drained (pods stopped in the backend, their
  controller's replacements Pending), the Node and the leader Lease are deleted, and
  no object of the release is left.
"""

from __future__ import annotations

import json
import os
import secrets
import shutil
import signal
import subprocess
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.integration.agent import Kube, free_port, pod_identity, wait_for
from vkpy.devcluster import DevCluster
from vkpy.devcluster import nodes as devnodes
from vkpy.devcluster.binaries import tool_dir

CHART = Path(__file__).resolve().parents[2] / "charts" / "vkpy"
RELEASE = "vk"
FULLNAME = "vk-vkpy"
NAMESPACE = "vkpy-system"
NODE = "vk-helm"
APPS = "apps"
LEASE_DURATION = 8
LABELS = f"app.kubernetes.io/name=vkpy,app.kubernetes.io/instance={RELEASE}"
VKPY_PODS = f"{LABELS},!app.kubernetes.io/component"


@dataclass
class Hosted:
    """The dev cluster, helm, and the release's values."""

    dev: DevCluster
    helm: list[str]
    values: Path
    platform: Path
    kube: Kube  # in NAMESPACE
    apps: Kube  # in APPS: the workload on the virtual node

    def run_helm(self, *args: str, timeout: float = 240) -> str:
        argv = [*self.helm, *args, "--namespace", NAMESPACE, f"--kubeconfig={self.dev.kubeconfig}"]
        result = subprocess.run(argv, capture_output=True, text=True, timeout=timeout, check=False)
        if result.returncode != 0:
            raise AssertionError(f"{argv} failed:\n{result.stdout}\n{result.stderr}")
        return result.stdout


def values(platform: Path) -> dict[str, Any]:
    """What a user of the process backend sets (docs/deploy.md): listen on the pod's
    IP (pods share their host's network), no fixed uid (the backend gives each pod
    one of its own), replicas on different workers; plus the test's own ports and a
    sim platform directory the replicas share."""
    return {
        "provider": "sim",
        "providers": {"sim": {"platform_dir": "/var/lib/sim-platform"}},
        "nodeName": NODE,
        "listenAddress": "$(VKPY_NODE_IP)",
        "kubeletPort": free_port(),
        "healthPort": free_port(),
        "metrics": {"port": free_port()},
        "logFormat": "text",
        "leaderElection": {"leaseDuration": LEASE_DURATION, "renewDeadline": 5, "retryPeriod": 1},
        "servingCert": {"mode": "csr", "approver": {"enabled": True}},
        "podSecurityContext": {"runAsUser": None, "runAsGroup": None, "fsGroup": None},
        "nodeSelector": {devnodes.POOL_LABEL: "regular"},
        "affinity": {
            "podAntiAffinity": {
                "requiredDuringSchedulingIgnoredDuringExecution": [
                    {
                        "topologyKey": "kubernetes.io/hostname",
                        "labelSelector": {
                            "matchLabels": {
                                "app.kubernetes.io/name": "vkpy",
                                "app.kubernetes.io/instance": RELEASE,
                            },
                            "matchExpressions": [
                                {"key": "app.kubernetes.io/component", "operator": "DoesNotExist"}
                            ],
                        },
                    }
                ]
            }
        },
        "extraVolumes": [
            {"name": "platform", "hostPath": {"path": str(platform), "type": "Directory"}}
        ],
        "extraVolumeMounts": [{"name": "platform", "mountPath": "/var/lib/sim-platform"}],
    }


@pytest.fixture(scope="module")
def hosted(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Hosted]:
    # Outside /tmp: a pod's own /tmp (the chart mounts an emptyDir there) would cover
    # its pod directory, which the mount namespace keeps at its real path.
    directory = Path(tempfile.mkdtemp(prefix="vkpy-helm-", dir="/var/tmp"))
    dev = DevCluster(directory, verify_kubelet_certs=True)
    dev.up()
    platform = Path(devnodes.SHARED_HOST_PATH) / f"helm-{secrets.token_hex(4)}"
    helm_env = [f"HELM_{kind}_HOME" for kind in ("CACHE", "CONFIG", "DATA")]
    saved = {name: os.environ.get(name) for name in helm_env}
    try:
        dev.start_nodes([devnodes.worker(1), devnodes.worker(2)])
        platform.mkdir(parents=True)
        platform.chmod(0o777)  # every replica (a uid of its own) writes the platform
        home = tmp_path_factory.mktemp("helm-home")
        for name in helm_env:
            os.environ[name] = str(home / name.lower())
        values_file = home / "values.yaml"
        values_file.write_text(yaml.safe_dump(values(platform)))
        access = dev.access()
        access.run_kubectl("create", "namespace", APPS)
        yield Hosted(
            dev=dev,
            helm=[str(tool_dir("helm") / "helm")],
            values=values_file,
            platform=platform,
            kube=Kube(access, NAMESPACE),
            apps=Kube(access, APPS),
        )
    finally:
        shown = dev.access().run_kubectl(
            "logs", "-n", NAMESPACE, "-l", LABELS, "--prefix", "--tail=30", check=False
        )
        print(f"--- the release's pods ---\n{shown.stdout}{shown.stderr}")
        for name in ("vkpy-worker-1", "vkpy-worker-2"):
            log = dev.logs_dir / f"{name}.log"
            if log.exists():
                print(f"--- {name} ---\n{log.read_text(errors='replace')[-6000:]}")
        dev.down()
        shutil.rmtree(platform, ignore_errors=True)
        shutil.rmtree(directory, ignore_errors=True)
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


# --- reading the cluster --------------------------------------------------------------------


def vkpy_pods(hosted: Hosted) -> list[dict[str, Any]]:
    return [
        p for p in hosted.kube.list("pods", VKPY_PODS) if not p["metadata"].get("deletionTimestamp")
    ]


def ready(obj: dict[str, Any] | None) -> bool:
    conditions = ((obj or {}).get("status") or {}).get("conditions") or []
    return any(c["type"] == "Ready" and c["status"] == "True" for c in conditions)


def node(hosted: Hosted) -> dict[str, Any] | None:
    return hosted.kube.get("node", NODE, namespaced=False)


def node_ip(obj: dict[str, Any] | None) -> str:
    addresses = ((obj or {}).get("status") or {}).get("addresses") or []
    return next((a["address"] for a in addresses if a["type"] == "InternalIP"), "")


def leader(hosted: Hosted) -> str:
    out = hosted.kube.kubectl(
        "get", "lease", "-n", "kube-node-lease", FULLNAME, "-o", "json", "--ignore-not-found"
    )
    lease = json.loads(out) if out.strip() else {}
    return str((lease.get("spec") or {}).get("holderIdentity") or "")


def workload(hosted: Hosted) -> list[dict[str, Any]]:
    return [
        p for p in hosted.apps.list("pods", "app=web") if not p["metadata"].get("deletionTimestamp")
    ]


def identity(hosted: Hosted) -> dict[str, tuple[Any, ...]]:
    """What must not change while vkpy rolls or fails over, per workload pod."""
    return {pod["metadata"]["name"]: pod_identity(pod) for pod in workload(hosted)}


def logs_and_exec_work(hosted: Hosted) -> bool:
    """`kubectl logs` and `exec` on a workload pod, through the API server (which
    verifies the serving certificate of the node's current leader)."""
    pods = workload(hosted)
    if not pods:
        return False
    name = pods[0]["metadata"]["name"]
    access = hosted.apps.cluster
    logs = access.run_kubectl("logs", "-n", APPS, name, "--tail=1", check=False)
    run = access.run_kubectl("exec", "-n", APPS, name, "--", "echo", "through-vkpy", check=False)
    return (
        logs.returncode == 0 and logs.stdout.startswith("line ") and run.stdout == "through-vkpy\n"
    )


def vkpy_pid(identity_name: str) -> int:
    """The pid of the vkpy process of pod `identity_name` (its leader identity), found
    by its environment, as an operator on the worker's host would find it."""
    wanted = f"VKPY_LEADER_ELECT_IDENTITY={identity_name}".encode()
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes().split(b"\0")
            environ = (entry / "environ").read_bytes().split(b"\0")
        except OSError:
            continue
        if b"vkpy" in cmdline and wanted in environ:
            return int(entry.name)
    raise AssertionError(f"no vkpy process of {identity_name}")


WEB = {
    "apiVersion": "apps/v1",
    "kind": "Deployment",
    "metadata": {"name": "web"},
    "spec": {
        "replicas": 2,
        "selector": {"matchLabels": {"app": "web"}},
        "template": {
            "metadata": {"labels": {"app": "web"}},
            "spec": {
                "nodeSelector": {"type": "virtual-kubelet", "kubernetes.io/hostname": NODE},
                "tolerations": [
                    {
                        "key": "virtual-kubelet.io/provider",
                        "operator": "Exists",
                        "effect": "NoSchedule",
                    }
                ],
                "containers": [{"name": "app", "image": "example.com/web:1"}],
            },
        },
    },
}


# --- the release's life ---------------------------------------------------------------------


def test_install_runs_vkpy_in_cluster_on_a_worker(hosted: Hosted) -> None:
    began = time.monotonic()
    hosted.run_helm(
        "install", RELEASE, str(CHART), "--create-namespace", "-f", str(hosted.values),
        "--wait", "--timeout=3m",
    )  # fmt: skip
    print(f"helm install --wait: {time.monotonic() - began:.1f} s")
    (pod,) = vkpy_pods(hosted)
    assert pod["spec"]["nodeName"].startswith("vkpy-worker-")
    pod_ip = pod["status"]["podIP"]
    assert pod_ip.startswith("127.0.1.")
    wait_for("the virtual node Ready", lambda: ready(node(hosted)), timeout=60)
    registered = node(hosted)
    assert registered is not None and node_ip(registered) == pod_ip
    assert registered["metadata"]["labels"]["type"] == "virtual-kubelet"

    # in-cluster, at the paths a container has them, with only the ServiceAccount
    sa_dir = "/var/run/secrets/kubernetes.io/serviceaccount"
    name = pod["metadata"]["name"]
    shown = hosted.kube.kubectl(
        "exec",
        "-n",
        NAMESPACE,
        name,
        "--",
        "sh",
        "-c",
        f'cat {sa_dir}/namespace; echo " $KUBERNETES_SERVICE_HOST ${{KUBECONFIG:-none}}";'
        " head -1 /etc/vkpy/provider/provider.yaml",
    )
    assert shown.split() == [
        NAMESPACE,
        "127.0.0.1",
        "none",
        "platform_dir:",
        "/var/lib/sim-platform",
    ]

    # its serving certificate came by CSR, requested by the ServiceAccount, approved
    account = f"system:serviceaccount:{NAMESPACE}:{FULLNAME}"
    csrs = json.loads(hosted.kube.kubectl("get", "csr", "-o", "json"))["items"]
    mine = [c for c in csrs if c["spec"].get("username") == account]
    assert mine and all(c["status"].get("certificate") for c in mine)
    assert all(c["status"]["conditions"][0]["type"] == "Approved" for c in mine)

    hosted.apps.apply(WEB)
    wait_for(
        "the workload Running on the virtual node",
        lambda: (
            len(pods := workload(hosted)) == 2
            and all(
                p["status"].get("phase") == "Running" and p["spec"].get("nodeName") == NODE
                for p in pods
            )
        ),
        timeout=60,
    )
    # the API server verifies kubelet certificates here (--kubelet-certificate-authority)
    assert "--kubelet-certificate-authority" in " ".join(
        next(p for p in hosted.dev.state.processes if p.name == "kube-apiserver").argv
    )
    wait_for("kubectl logs and exec through the API server", lambda: logs_and_exec_work(hosted))


def test_upgrade_changing_a_value_rolls_without_losing_pods(hosted: Hosted) -> None:
    (old,) = vkpy_pods(hosted)
    before = identity(hosted)
    hosted.run_helm(
        "upgrade", RELEASE, str(CHART), "-f", str(hosted.values), "--set", "logLevel=debug",
        "--wait", "--timeout=3m",
    )  # fmt: skip
    old_name = old["metadata"]["name"]
    (new,) = wait_for(
        "the old vkpy pod gone, one new one",
        lambda: (
            len(p := hosted.kube.list("pods", VKPY_PODS)) == 1
            and p[0]["metadata"]["name"] != old_name
            and p
        ),
        timeout=120,
    )
    assert "--log-level=debug" in new["spec"]["containers"][0]["args"]
    wait_for("the new pod leads", lambda: leader(hosted) == new["metadata"]["name"], timeout=60)
    wait_for(
        "the Node at the new pod, Ready",
        lambda: node_ip(n := node(hosted)) == new["status"]["podIP"] and ready(n),
        timeout=60,
    )
    assert identity(hosted) == before
    wait_for("kubectl logs and exec through the new pod", lambda: logs_and_exec_work(hosted))


def test_standby_takes_over_when_the_leader_is_killed(hosted: Hosted) -> None:
    hosted.run_helm(
        "upgrade", RELEASE, str(CHART), "-f", str(hosted.values), "--set", "logLevel=debug",
        "--set", "replicaCount=2", "--wait", "--timeout=3m",
    )  # fmt: skip
    pods = wait_for("two vkpy replicas", lambda: len(p := vkpy_pods(hosted)) == 2 and p)
    assert len({p["spec"]["nodeName"] for p in pods}) == 2  # one per worker
    first = wait_for("a leader", lambda: leader(hosted), timeout=60)
    ips = {p["metadata"]["name"]: p["status"]["podIP"] for p in pods}
    (standby,) = [name for name in ips if name != first]
    wait_for("the Node at the leader", lambda: node_ip(node(hosted)) == ips[first])
    before = identity(hosted)

    # The leader's host dies: its worker and the vkpy process with it (a process
    # killed alone is restarted in its pod, which resumes the Lease as the same holder).
    host = next(p["spec"]["nodeName"] for p in pods if p["metadata"]["name"] == first)
    worker = next(a for a in hosted.dev.extras().records.of_kind("node") if a.process.name == host)
    killed_at = time.monotonic()
    os.kill(worker.process.pid, signal.SIGKILL)
    os.kill(vkpy_pid(first), signal.SIGKILL)
    wait_for("the standby to take the Lease", lambda: leader(hosted) == standby, timeout=90)
    wait_for(
        "the Node at the standby, Ready",
        lambda: node_ip(n := node(hosted)) == ips[standby] and ready(n),
        timeout=60,
    )
    took = time.monotonic() - killed_at
    wait_for("kubectl logs and exec through the new leader", lambda: logs_and_exec_work(hosted))
    served = time.monotonic() - killed_at
    print(
        f"failover after SIGKILL of the leader's process: Lease and Node {took:.1f} s, "
        f"logs/exec served {served:.1f} s (lease duration {LEASE_DURATION} s)"
    )
    assert identity(hosted) == before
    hosted.dev.start_nodes([devnodes.worker(int(host.rsplit("-", 1)[1]))])  # back up
    records = {p.stem for p in hosted.platform.glob("*.json")}
    assert records == {uid for uid, *_ in before.values()}  # nothing duplicated


def test_uninstall_drains_and_leaves_nothing_behind(hosted: Hosted) -> None:
    hosted.run_helm("uninstall", RELEASE, "--wait", "--timeout=3m")
    assert node(hosted) is None
    assert leader(hosted) == ""
    kinds = "all,configmap,secret,serviceaccount,role,rolebinding,pdb,job"
    wait_for(
        "nothing of the release left in its namespace (pods stop in their grace period)",
        lambda: (
            not hosted.kube.kubectl(
                "get", kinds, "-n", NAMESPACE, "-l", LABELS, "-o", "name"
            ).strip()
        ),
        timeout=60,
    )
    in_lease_ns = hosted.kube.kubectl(
        "get", "role,rolebinding,lease", "-n", "kube-node-lease", "-l", LABELS, "-o", "name"
    )
    assert in_lease_ns.strip() == ""
    cluster_wide = hosted.kube.kubectl(
        "get", "clusterrole,clusterrolebinding", "-l", LABELS, "-o", "name"
    )
    assert cluster_wide.strip() == ""
    # the workload was stopped in the backend; its controller's replacements wait
    assert list(hosted.platform.glob("*.json")) == []
    pods = workload(hosted)
    assert len(pods) == 2 and all(not p["spec"].get("nodeName") for p in pods)
