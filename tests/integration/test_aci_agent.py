"""Pods on a virtual node backed by Azure Container Instances, emulated by our own
ACI emulator (tests/aci_emulator), through the real control plane: `python -m vkpy
--provider aci` as a process, talking to the emulator through the real Azure SDK and
azure-identity; pods created and read with the pinned kubectl, `kubectl logs` and
`kubectl exec` through the API server.
"""
# ruff: noqa: F811 - pytest fixtures are imported by name and then requested as arguments

from __future__ import annotations

import http.client
import json
import ssl
import subprocess
from pathlib import Path
from typing import Any

from tests.integration.aci_fixtures import AciSetup, aci, aci_emulator  # noqa: F401
from tests.integration.agent import Agent, Kube, wait_for
from tests.integration.cannot_start import cannot_start
from tests.integration.conftest import StartAgent
from tests.integration.stream_helpers import (
    Terminal,
    client_certificate,
    kubectl,
    kubectl_env,
    start_kubectl,
)
from vkpy.providers.aci.naming import group_name
from vkpy.providers.base import PodRef


def aci_pod(
    name: str, node: str, containers: list[dict[str, Any]] | None = None, **spec: Any
) -> dict[str, Any]:
    """The seed's shape: scheduled onto the virtual node by its labels and taint."""
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "annotations": spec.pop("annotations", {})},
        "spec": {
            "nodeSelector": {"type": "virtual-kubelet", "kubernetes.io/hostname": node},
            "tolerations": [
                {"key": "virtual-kubelet.io/provider", "operator": "Exists", "effect": "NoSchedule"}
            ],
            "containers": containers
            or [
                {
                    "name": "hello",
                    "image": "mcr.microsoft.com/azuredocs/aci-helloworld",
                    "command": ["sh", "-c", "echo hello from aci; exec sleep 3600"],
                    "ports": [{"containerPort": 80}],
                    "resources": {"requests": {"cpu": "500m", "memory": "1Gi"}},
                }
            ],
            **spec,
        },
    }


def ref_of(pod: dict[str, Any]) -> PodRef:
    m = pod["metadata"]
    return PodRef(m["namespace"], m["name"], m["uid"])


def phase_is(kube: Kube, name: str, phase: str) -> Any:
    return lambda: (p := kube.get("pod", name)) and p["status"].get("phase") == phase and p


def events(kube: Kube, name: str) -> dict[str, str]:
    return {e["reason"]: e["message"] for e in kube.events(name)}


def start_aci(start_agent: StartAgent, aci: AciSetup, **overrides: Any) -> Agent:
    return start_agent(provider="aci", config=aci.config(**overrides))


def test_seed_pod_runs_shows_the_group_ip_logs_and_is_deleted(
    kube: Kube, start_agent: StartAgent, aci: AciSetup
) -> None:
    agent = start_aci(start_agent, aci)
    created = kube.create(aci_pod("hello", agent.node_name))
    running = wait_for("Running", phase_is(kube, "hello", "Running"), timeout=90)
    name = group_name(ref_of(created))
    group = aci.emulator.group(name, aci.resource_group)
    assert group is not None
    assert running["status"]["podIP"] == group.ip
    wide = kube.kubectl("get", "pod", "hello", "-n", kube.namespace, "-o", "wide")
    assert group.ip in wide and agent.node_name in wide
    status = running["status"]["containerStatuses"][0]
    assert status["ready"] is True and "running" in status["state"]
    assert "1.1 GB" in running["status"]["message"]  # 1Gi rounded up to ACI's 0.1 GB steps
    adjusted = wait_for("its Event", lambda: events(kube, "hello").get("BackendAdjusted"))
    assert "1.1 GB" in adjusted
    model = group.model
    assert model.tags["vkpy.io/node"] == agent.node_name
    assert model.tags["vkpy.io/pod-uid"] == created["metadata"]["uid"]
    assert model.tags["vkpy.io/pod-namespace"] == kube.namespace
    assert model.tags["vkpy.io/pod-name"] == "hello"
    assert model.containers[0].resources.requests.cpu == 0.5
    assert model.ip_address.type == "Public" and model.ip_address.ports[0].port == 80
    assert {v.name for v in model.volumes} == {
        v["name"] for v in running["spec"]["volumes"]
    }  # the service account token volume, as an ACI secret volume
    wait_for(
        "the log line",
        lambda: kube.kubectl("logs", "-n", kube.namespace, "hello") == "hello from aci\n",
    )
    wait_for("ACI's events as pod Events", lambda: "Pulled" in events(kube, "hello"))
    kube.kubectl("delete", "pod", "hello", "-n", kube.namespace, "--timeout=60s")
    assert aci.emulator.group(name, aci.resource_group) is None


def test_exec_attach_logs_and_a_crash_looping_container(
    kube: Kube, start_agent: StartAgent, aci: AciSetup
) -> None:
    agent = start_aci(start_agent, aci)
    ticker = {
        "name": "app",
        "image": "busybox",
        "command": ["sh", "-c", "i=0; while true; do i=$((i+1)); echo tick $i; sleep 0.3; done"],
        "env": [{"name": "GREETING", "value": "hello"}],
        "resources": {"requests": {"cpu": "100m", "memory": "100M"}},
    }
    counter = {
        "name": "app",
        "image": "busybox",
        "command": ["sh", "-c", "for i in 1 2 3 4 5; do echo line $i; sleep 0.4; done"],
        "resources": {"requests": {"cpu": "100m", "memory": "100M"}},
    }
    crasher = {
        "name": "app",
        "image": "busybox",
        "command": ["sh", "-c", "echo boom; exit 3"],
        "resources": {"requests": {"cpu": "100m", "memory": "100M"}},
    }
    kube.create(aci_pod("ticker", agent.node_name, [ticker]))
    kube.create(aci_pod("counter", agent.node_name, [counter], restartPolicy="Never"))
    kube.create(aci_pod("crasher", agent.node_name, [crasher]))
    wait_for("ticker Running", phase_is(kube, "ticker", "Running"), timeout=90)

    # logs -f of a container that ends: every line once, then kubectl returns
    wait_for("counter Running", phase_is(kube, "counter", "Running"), timeout=60)
    followed = kubectl(kube.cluster, "logs", "-f", "-n", kube.namespace, "counter", timeout=60)
    assert followed.stdout.decode() == "".join(f"line {i}\n" for i in range(1, 6))
    wait_for("counter Succeeded", phase_is(kube, "counter", "Succeeded"))
    assert kube.kubectl("logs", "-n", kube.namespace, "counter", "--tail=2") == "line 4\nline 5\n"
    stamped = kube.kubectl("logs", "-n", kube.namespace, "counter", "--timestamps", "--tail=1")
    assert stamped.endswith(" line 5\n") and stamped.startswith("20")
    limited = kube.kubectl("logs", "-n", kube.namespace, "counter", "--limit-bytes=9")
    assert limited == "line 1\nli"

    # exec of one command, and the refusal ACI's exec API calls for
    env = kubectl(kube.cluster, "exec", "-n", kube.namespace, "ticker", "--", "env")
    assert env.returncode == 0 and b"GREETING=hello\n" in env.stdout
    refused = kubectl(kube.cluster, "exec", "-n", kube.namespace, "ticker", "--", "ls", "-l")
    assert refused.returncode != 0 and b"without arguments" in refused.stderr

    # exec -it: a shell on a terminal of kubectl's size
    argv = kube.cluster.kubectl_argv("exec", "-it", "-n", kube.namespace, "ticker", "--", "sh")
    terminal = Terminal(argv, kubectl_env(kube.cluster), rows=30, cols=100)
    try:
        terminal.expect(r"[$#] $")
        terminal.send("echo $GREETING-there\r")
        assert "hello-there" in terminal.expect(r"[$#] $")
        terminal.send("stty size\r")
        assert "30 100" in terminal.expect(r"[$#] $")
        terminal.send("exit\r")
        assert terminal.wait() == 0
    finally:
        terminal.kill()

    # --since: only the lines of the last seconds (the ticker has run for a while)
    everything = kube.kubectl("logs", "-n", kube.namespace, "ticker").splitlines()
    recent = kube.kubectl("logs", "-n", kube.namespace, "ticker", "--since=2s").splitlines()
    assert everything[0] == "tick 1" and recent and len(recent) < len(everything)
    assert int(recent[0].split()[1]) > 1 and recent[0].startswith("tick ")

    # attach: the container's output from now on
    attached = start_kubectl(
        kube.cluster, "attach", "-n", kube.namespace, "ticker", stdout=subprocess.PIPE
    )
    try:
        assert attached.stdout is not None
        first = attached.stdout.readline().decode()
        second = attached.stdout.readline().decode()
        assert first.startswith("tick ") and second.startswith("tick ")
        assert int(second.split()[1]) == int(first.split()[1]) + 1
    finally:
        attached.kill()
        attached.wait()

    # a failing container: restarted by ACI, reported as crash looping
    def looping() -> Any:
        pod = kube.get("pod", "crasher")
        status = ((pod or {}).get("status", {}).get("containerStatuses") or [{}])[0]
        last = (status.get("lastState") or {}).get("terminated") or {}
        waiting = (status.get("state") or {}).get("waiting") or {}
        return (
            status.get("restartCount", 0) >= 2
            and last.get("exitCode") == 3
            and waiting.get("reason") == "CrashLoopBackOff"
            and status
        )

    status = wait_for("CrashLoopBackOff after restarts with exit code 3", looping, timeout=90)
    assert not status["ready"]
    assert status["lastState"]["terminated"]["reason"] == "Error"
    crashed = kube.get("pod", "crasher")
    assert crashed is not None and crashed["status"]["phase"] == "Running"  # as the kubelet says


def test_refused_pods_fail_with_acis_words_while_others_run(
    kube: Kube, start_agent: StartAgent, aci: AciSetup
) -> None:
    agent = start_aci(start_agent, aci, gpu_capacity=4, gpu_sku="K80")
    big = {
        "name": "app",
        "image": "busybox",
        "resources": {"requests": {"cpu": "8", "memory": "1Gi"}},
    }
    kube.create(aci_pod("big", agent.node_name, [big]))
    host = aci_pod("host", agent.node_name, volumes=[{"name": "h", "hostPath": {"path": "/"}}])
    kube.create(host)
    gpu = {
        "name": "cuda",
        "image": "busybox",
        "resources": {"limits": {"nvidia.com/gpu": "2", "cpu": "2", "memory": "4G"}},
    }
    gpu_pod = kube.create(aci_pod("gpu", agent.node_name, [gpu]))
    kube.create(aci_pod("fine", agent.node_name))
    # the emulator mounts volumes only onto directories this host has: /srv is one
    shared = {"name": "shared", "mountPath": "/srv"}
    host_srv = sorted(p.name for p in Path("/srv").iterdir())
    reader = (
        "until [ -f /srv/note ]; do sleep 0.1; done; cat /srv/note; "
        "touch /srv/mine 2>/dev/null || echo read-only; exec sleep 600"
    )
    duo = kube.create(
        aci_pod(
            "duo",
            agent.node_name,
            [
                {
                    "name": "writer",
                    "image": "busybox",
                    "volumeMounts": [shared],
                    "command": ["sh", "-c", "echo written by writer > /srv/note; exec sleep 600"],
                    "readinessProbe": {"exec": {"command": ["true"]}, "periodSeconds": 3},
                    "resources": {"requests": {"cpu": "100m", "memory": "100M"}},
                },
                {
                    "name": "reader",
                    "image": "busybox",
                    "volumeMounts": [{**shared, "readOnly": True}],
                    "command": ["sh", "-c", reader],
                    "resources": {"requests": {"cpu": "100m", "memory": "100M"}},
                },
            ],
            initContainers=[
                {
                    "name": "setup",
                    "image": "busybox",
                    "command": ["sh", "-c", "echo prepared"],
                    "volumeMounts": [shared],
                }
            ],
            volumes=[{"name": "shared", "emptyDir": {}}],
        )
    )
    aci.emulator.emulator.registries["myregistry.azurecr.io"] = ("puller", "s3cret")
    kube.kubectl(
        "create", "secret", "docker-registry", "regcred", "-n", kube.namespace,
        "--docker-server=myregistry.azurecr.io", "--docker-username=puller",
        "--docker-password=s3cret",
    )  # fmt: skip
    private = {
        "name": "app",
        "image": "myregistry.azurecr.io/app:1",
        "resources": {"requests": {"cpu": "100m", "memory": "100M"}},
    }
    kube.create(
        aci_pod("private", agent.node_name, [private], imagePullSecrets=[{"name": "regcred"}])
    )
    kube.create(aci_pod("nocreds", agent.node_name, [private]))

    failed = wait_for("big Failed", phase_is(kube, "big", "Failed"), timeout=60)
    assert failed["status"]["reason"] == "ResourceRequestsNotSupported"
    assert "maximum allowed resource" in failed["status"]["message"]
    wait_for("an Event", lambda: "ResourceRequestsNotSupported" in events(kube, "big"))
    assert failed["status"]["message"].startswith("Pod was rejected: ")  # as at admission
    # a volume ACI lacks: Pending, Waiting with CreateContainerError, never Failed (issue 31)
    unsupported = cannot_start(kube, "host")
    assert unsupported["reason"] == "CreateContainerError"
    assert unsupported["message"].startswith("UnsupportedVolume: ")
    assert any("UnsupportedVolume" in e["message"] for e in unsupported["events"])
    wait_for("fine Running", phase_is(kube, "fine", "Running"), timeout=60)
    wait_for("gpu Running", phase_is(kube, "gpu", "Running"), timeout=60)
    node = kube.get("node", agent.node_name, namespaced=False)
    assert node is not None and node["status"]["capacity"]["nvidia.com/gpu"] == "4"
    group = aci.emulator.group(group_name(ref_of(gpu_pod)), aci.resource_group)
    assert group is not None
    requested = group.model.containers[0].resources.requests.gpu
    assert (requested.count, requested.sku) == (2, "K80")
    both = wait_for("duo Running", phase_is(kube, "duo", "Running"), timeout=60)
    assert {c["name"] for c in both["status"]["containerStatuses"]} == {"writer", "reader"}
    (setup,) = both["status"]["initContainerStatuses"]
    assert setup["state"]["terminated"]["exitCode"] == 0
    group = aci.emulator.group(group_name(ref_of(duo)), aci.resource_group)
    assert group is not None
    assert [c.name for c in group.model.init_containers] == ["setup"]
    mounts = {
        c.name: {m.mount_path: m.name for m in c.volume_mounts} for c in group.model.containers
    }
    assert mounts["writer"]["/srv"] == mounts["reader"]["/srv"] == "shared"
    # the one emptyDir, really shared: what the writer wrote, the reader reads
    wait_for(
        "the reader's logs show the writer's file",
        lambda: (
            kube.kubectl("logs", "-n", kube.namespace, "duo", "-c", "reader")
            == "written by writer\nread-only\n"
        ),
        timeout=30,
    )
    assert sorted(p.name for p in Path("/srv").iterdir()) == host_srv  # host untouched
    assert group.model.containers[0].readiness_probe.exec_property.command == ["true"]
    wait_for("private Running (imagePullSecrets)", phase_is(kube, "private", "Running"), 60)
    refused = cannot_start(kube, "nocreds")  # Pending, never Failed (issue 31)
    assert refused["reason"] == "ErrImagePull"
    assert "myregistry.azurecr.io" in refused["message"]
    assert refused["message"].startswith("RegistryErrorResponse: ")  # the operation's error
    del aci.emulator.emulator.registries["myregistry.azurecr.io"]


def test_windows_node_runs_windows_groups(
    kube: Kube, start_agent: StartAgent, aci: AciSetup
) -> None:
    agent = start_agent(provider="azure", config=aci.config(), args=["--os=windows"])
    manifest = aci_pod("win", agent.node_name)
    manifest["spec"]["nodeSelector"]["kubernetes.io/os"] = "windows"
    created = kube.create(manifest)
    wait_for("win Running", phase_is(kube, "win", "Running"), timeout=90)
    node = kube.get("node", agent.node_name, namespaced=False)
    assert node is not None and node["metadata"]["labels"]["kubernetes.io/os"] == "windows"
    taints = {t["key"]: t.get("value") for t in node["spec"].get("taints") or []}
    assert taints["virtual-kubelet.io/provider"] == "azure"
    group = aci.emulator.group(group_name(ref_of(created)), aci.resource_group)
    assert group is not None and group.model.os_type == "Windows"


def test_spot_eviction_and_a_group_deleted_behind_vkpys_back(
    kube: Kube, start_agent: StartAgent, aci: AciSetup
) -> None:
    agent = start_aci(start_agent, aci)
    template = aci_pod(
        "spot", agent.node_name, annotations={"vkpy.io/aci-priority": "Spot"}, restartPolicy="Never"
    )
    template["metadata"] = {**template["metadata"], "labels": {"app": "spot"}}
    del template["metadata"]["name"]
    kube.create(
        {
            "apiVersion": "batch/v1",
            "kind": "Job",
            "metadata": {"name": "spot"},
            "spec": {
                # one failure fails the Job, unless it was a disruption (an eviction)
                "backoffLimit": 0,
                "podFailurePolicy": {
                    "rules": [
                        {"action": "Ignore", "onPodConditions": [{"type": "DisruptionTarget"}]}
                    ]
                },
                "template": {"metadata": template["metadata"], "spec": template["spec"]},
            },
        }
    )
    lost = kube.create(aci_pod("lost", agent.node_name, restartPolicy="Never"))

    def spot_pods(phase: str, but: str = "") -> Any:
        pods = kube.list("pod", "app=spot")
        found = [p for p in pods if p["status"].get("phase") == phase]
        found = [p for p in found if p["metadata"]["uid"] != but]
        return found and found[0]

    spot = wait_for("the Job's spot pod Running", lambda: spot_pods("Running"), 90)
    wait_for("lost Running", phase_is(kube, "lost", "Running"), timeout=90)
    group = aci.emulator.group(group_name(ref_of(spot)), aci.resource_group)
    assert group is not None and group.model.priority == "Spot"
    aci.emulator.evict(group_name(ref_of(spot)), aci.resource_group)
    evicted = wait_for("spot Failed", phase_is(kube, spot["metadata"]["name"], "Failed"), 60)
    assert evicted["status"]["reason"] == "Evicted"
    assert "evicted" in evicted["status"]["message"]
    target = {c["type"]: c for c in evicted["status"]["conditions"]}["DisruptionTarget"]
    assert (target["status"], target["reason"]) == ("True", "TerminationByKubelet")
    # the owning controller reacts: the Job ignores the disruption and runs a new pod
    uid = spot["metadata"]["uid"]
    replacement = wait_for("a replacement Running", lambda: spot_pods("Running", uid), 90)
    again = aci.emulator.group(group_name(ref_of(replacement)), aci.resource_group)
    assert again is not None and again.model.priority == "Spot" and again is not group
    aci.emulator.delete_behind(group_name(ref_of(lost)), aci.resource_group)
    wait_for("lost Failed", phase_is(kube, "lost", "Failed"), timeout=60)
    wait_for("BackendLost Event", lambda: "BackendLost" in events(kube, "lost"))
    assert (
        aci.emulator.group(group_name(ref_of(lost)), aci.resource_group) is None
    )  # not re-created


def test_throttled_node_converges_and_a_restart_adopts_twenty_groups(
    kube: Kube, start_agent: StartAgent, aci: AciSetup
) -> None:
    agent = start_aci(start_agent, aci)
    aci.emulator.faults.throttle = 0.3
    aci.emulator.faults.retry_after = 0.2
    small = {
        "name": "app",
        "image": "busybox",
        "resources": {"requests": {"cpu": "100m", "memory": "100M"}},
    }
    created = [kube.create(aci_pod(f"p{i}", agent.node_name, [small])) for i in range(21)]

    def all_running() -> bool:
        return sum(p["status"].get("phase") == "Running" for p in kube.list("pod")) == 21

    wait_for("21 pods Running through 30% throttling", all_running, timeout=240)
    assert aci.emulator.store.calls["throttled"] > 0
    aci.emulator.faults.throttle = 0.0

    agent.kill()  # then p0 deleted while vkpy is down: twenty groups to adopt, two orphans
    gone = created[0]
    kube.kubectl("delete", "pod", "p0", "-n", kube.namespace, "--force", "--grace-period=0")
    stranger = {
        "vkpy.io/node": agent.node_name,
        "vkpy.io/pod-namespace": kube.namespace,
        "vkpy.io/pod-name": "never-existed",
        "vkpy.io/pod-uid": "0000-orphan",
    }
    aci.emulator.create_orphan("orphan-group", stranger, aci.resource_group)
    untagged = {"owner": "someone else"}
    aci.emulator.create_orphan("not-ours", untagged, aci.resource_group)
    puts = aci.emulator.store.calls.copy()
    agent.start()
    wait_for(
        "the orphans removed",
        lambda: (
            aci.emulator.group(group_name(ref_of(gone)), aci.resource_group) is None
            and aci.emulator.group("orphan-group", aci.resource_group) is None
        ),
        timeout=60,
    )
    assert aci.emulator.group("not-ours", aci.resource_group) is not None  # never touched
    assert all(
        aci.emulator.group(group_name(ref_of(p)), aci.resource_group) is not None
        for p in created[1:]
    )
    put = next(k for k in puts if k.startswith("PUT "))
    assert aci.emulator.store.calls[put] == puts[put]  # adopted as they were
    assert all(kube.phase(f"p{i}") == "Running" for i in range(1, 21))
    aci.emulator.delete_behind("not-ours", aci.resource_group)


def test_stats_summary_from_azure_monitor(
    kube: Kube, start_agent: StartAgent, aci: AciSetup
) -> None:
    agent = start_aci(start_agent, aci)
    busy = {
        "name": "app",
        "image": "busybox",
        "command": ["sh", "-c", "while true; do :; done"],
        "resources": {"requests": {"cpu": "500m", "memory": "100M"}},
    }
    kube.create(aci_pod("busy", agent.node_name, [busy]))
    wait_for("busy Running", phase_is(kube, "busy", "Running"), timeout=90)

    def kubelet_get(path: str) -> str:
        # straight to the kubelet port: the API server does not proxy to loopback nodes
        with client_certificate(kube.cluster) as cert:
            context = ssl.create_default_context()
            context.check_hostname = False
            context.verify_mode = ssl.CERT_NONE
            context.load_cert_chain(*cert)
            connection = http.client.HTTPSConnection("127.0.0.1", agent.port, context=context)
            try:
                connection.request("GET", path)
                response = connection.getresponse()
                assert response.status == 200, (path, response.status)
                return response.read().decode()
            finally:
                connection.close()

    def summary() -> Any:
        pods = json.loads(kubelet_get("/stats/summary"))["pods"]
        mine = [p for p in pods if p["podRef"]["name"] == "busy"]
        return mine and mine[0]["containers"][0]

    container = wait_for("busy in /stats/summary", summary, timeout=60)
    assert container["name"] == "app"
    assert container["memory"]["workingSetBytes"] > 0
    resource = kubelet_get("/metrics/resource")
    assert 'container_memory_working_set_bytes{container="app"' in resource
