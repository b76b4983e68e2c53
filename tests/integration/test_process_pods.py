"""Pods on the process backend: real host processes, checked through kubectl.

Every test runs `python -m vkpy --provider=process` against the real control plane;
containers are `sh -c` scripts, and what they saw is read back from files they wrote
into an emptyDir (under the pod's directory) or from the API server.
"""

# ruff: noqa: F811 - pytest fixtures are imported by name and then requested as arguments
from __future__ import annotations

import base64
import json
import os
import signal
import time
from pathlib import Path
from typing import Any

import pytest

from tests.integration.agent import Kube, free_port, wait_for
from tests.integration.cannot_start import cannot_start
from tests.integration.process_fixtures import (  # noqa: F401 - fixtures
    StartProcessAgent,
    condition,
    phase_is,
    pod_dir,
    process_pod,
    reachable_pods_dir,
    shared_dir,
    start_process_agent,
    status_of,
)


def test_running_and_failed_with_exit_code(
    kube: Kube, start_process_agent: StartProcessAgent
) -> None:
    agent = start_process_agent()
    kube.create(process_pod("sleeper", agent.node_name, "echo hi; sleep 3600"))
    kube.create(process_pod("three", agent.node_name, "exit 3"))
    running = wait_for("Running", lambda: phase_is(kube, "sleeper", "Running"))
    state = status_of(running)
    assert "running" in state["state"]
    assert state["containerID"].startswith("process://")
    assert state["ready"] is True
    assert condition(running, "Ready") == "True"
    assert running["status"]["podIP"] == "127.0.0.1"
    failed = wait_for("Failed", lambda: phase_is(kube, "three", "Failed"))
    terminated = status_of(failed)["state"]["terminated"]
    assert terminated["exitCode"] == 3
    assert terminated["reason"] == "Error"
    log = (pod_dir(agent, kube, "sleeper") / "containers/app/instances/0/output.log").read_text()
    assert log.endswith(" stdout F hi\n")


def test_on_failure_crash_loop_backs_off(
    kube: Kube, start_process_agent: StartProcessAgent
) -> None:
    agent = start_process_agent()
    kube.create(process_pod("crasher", agent.node_name, "echo boom >&2; exit 1", "OnFailure"))
    seen: list[tuple[float, int, str]] = []

    def restarts() -> int:
        state = status_of(kube.get("pod", "crasher"))
        count = int(state.get("restartCount", 0))
        reason = (state.get("state", {}).get("waiting") or {}).get("reason", "")
        seen.append((time.monotonic(), count, reason))
        return count

    wait_for("four restarts", lambda: restarts() >= 4, timeout=60)
    pod = kube.get("pod", "crasher")
    state = status_of(pod)
    assert pod is not None and pod["status"]["phase"] == "Running"
    assert state["lastState"]["terminated"]["exitCode"] == 1
    assert "CrashLoopBackOff" in {reason for _, _, reason in seen}
    first = {count: at for at, count, _ in reversed(seen)}
    # 1 s doubling (capped at 4 s): restarts 2 -> 3 -> 4 are at least 2 s and 4 s apart.
    assert first[4] - first[3] >= 3.0
    assert "BackOff" in {e["reason"] for e in kube.events("crasher")}


def test_init_containers_run_in_order_and_a_failure_blocks(
    kube: Kube, start_process_agent: StartProcessAgent
) -> None:
    agent = start_process_agent()
    out = {"name": "out", "mountPath": "/out"}
    inits = [
        {
            "name": f"init{n}",
            "image": "busybox:1.36",
            "command": ["sh", "-c", f"sleep 0.5; echo init{n} >> out/order"],
            "volumeMounts": [out],
        }
        for n in (1, 2)
    ]
    kube.create(
        process_pod(
            "ordered",
            agent.node_name,
            "echo app >> out/order; sleep 3600",
            container={"volumeMounts": [out]},
            initContainers=inits,
            volumes=[{"name": "out", "emptyDir": {}}],
        )
    )
    blocked = [{"name": "fails", "image": "busybox:1.36", "command": ["sh", "-c", "exit 2"]}]
    kube.create(process_pod("blocked", agent.node_name, "sleep 3600", initContainers=blocked))
    kube.create(
        process_pod("retried", agent.node_name, "sleep 3600", "Always", initContainers=blocked)
    )
    wait_for("Running", lambda: phase_is(kube, "ordered", "Running"))
    order = wait_for(
        "app wrote its line",
        lambda: (
            (p := pod_dir(agent, kube, "ordered") / "volumes/out/order").exists()
            and p.read_text().count("\n") == 3
            and p.read_text()
        ),
    )
    assert order == "init1\ninit2\napp\n"
    pod = kube.get("pod", "ordered")
    assert condition(pod, "Initialized") == "True"
    assert status_of(pod, "init2", init=True)["state"]["terminated"]["reason"] == "Completed"

    failed = wait_for("Failed", lambda: phase_is(kube, "blocked", "Failed"), timeout=30)
    assert status_of(failed, "fails", init=True)["state"]["terminated"]["exitCode"] == 2
    assert "waiting" in status_of(failed)["state"]

    def init_restarted() -> dict[str, Any] | None:
        pod = kube.get("pod", "retried")
        return pod if status_of(pod, "fails", init=True).get("restartCount", 0) >= 2 else None

    retried = wait_for("init container restarted", init_restarted, timeout=30)
    assert retried["status"]["phase"] == "Pending"
    assert "waiting" in status_of(retried)["state"]
    assert not (pod_dir(agent, kube, "retried") / "containers/app/instances/0").exists()


def test_volumes_and_env_are_what_the_container_sees(
    kube: Kube, start_process_agent: StartProcessAgent
) -> None:
    agent = start_process_agent()
    kube.kubectl(
        "create", "configmap", "settings", "-n", kube.namespace,
        "--from-literal=color=blue", "--from-literal=size=L",
    )  # fmt: skip
    kube.kubectl(
        "create", "secret", "generic", "creds", "-n", kube.namespace,
        "--from-literal=password=s3cret",
    )  # fmt: skip
    script = """
        for f in cfg/color cfg/renamed sec/password down/labels down/name \
                 proj/color proj/ns var/run/secrets/kubernetes.io/serviceaccount/token; do
            printf '%s %s\\n' "$(stat -L -c %a "$f")" "$f" >> out/modes
        done
        cat cfg/renamed > out/renamed
        cat sec/password > out/password
        cat down/labels > out/labels
        cat proj/ns > out/ns
        cat var/run/secrets/kubernetes.io/serviceaccount/token > out/token
        echo "$COLOR $PASSWORD $POD_NAME $HOSTNAME" > out/env
        env | sort > out/environ
        pwd > out/pwd
        sleep 3600
    """
    mounts = [
        {"name": "out", "mountPath": "/out"},
        {"name": "cfg", "mountPath": "/cfg"},
        {"name": "sec", "mountPath": "/sec"},
        {"name": "down", "mountPath": "/down"},
        {"name": "proj", "mountPath": "/proj"},
    ]
    env = [
        {"name": "COLOR", "valueFrom": {"configMapKeyRef": {"name": "settings", "key": "color"}}},
        {"name": "PASSWORD", "valueFrom": {"secretKeyRef": {"name": "creds", "key": "password"}}},
        {"name": "POD_NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
    ]
    volumes = [
        {"name": "out", "emptyDir": {}},
        {
            "name": "cfg",
            "configMap": {
                "name": "settings",
                "items": [{"key": "color", "path": "color"}, {"key": "size", "path": "renamed"}],
                "defaultMode": 0o640,
            },
        },
        {"name": "sec", "secret": {"secretName": "creds", "defaultMode": 0o400}},
        {
            "name": "down",
            "downwardAPI": {
                "items": [
                    {"path": "labels", "fieldRef": {"fieldPath": "metadata.labels"}},
                    {"path": "name", "fieldRef": {"fieldPath": "metadata.name"}, "mode": 0o600},
                ]
            },
        },
        {
            "name": "proj",
            "projected": {
                "defaultMode": 0o444,
                "sources": [
                    {
                        "configMap": {
                            "name": "settings",
                            "items": [{"key": "color", "path": "color"}],
                        }
                    },
                    {
                        "downwardAPI": {
                            "items": [
                                {"path": "ns", "fieldRef": {"fieldPath": "metadata.namespace"}}
                            ]
                        }
                    },
                ],
            },
        },
    ]
    kube.create(
        process_pod(
            "volumes",
            agent.node_name,
            script,
            container={"volumeMounts": mounts, "env": env},
            volumes=volumes,
        )
    )
    wait_for("Running", lambda: phase_is(kube, "volumes", "Running"))
    out = pod_dir(agent, kube, "volumes") / "volumes/out"
    wait_for("the container's report", (out / "pwd").exists)
    modes = dict(line.split(" ")[::-1] for line in (out / "modes").read_text().splitlines())
    assert modes == {
        "cfg/color": "640",
        "cfg/renamed": "640",
        # The modes asked for: the files are the pod's user's, who reads a 0400
        # secret as a kubelet's pod does (and, through read-only mounts, never writes).
        "sec/password": "400",
        "down/labels": "644",
        "down/name": "600",
        "proj/color": "444",
        "proj/ns": "444",
        "var/run/secrets/kubernetes.io/serviceaccount/token": "644",
    }
    assert (out / "renamed").read_text() == "L"
    assert (out / "password").read_text() == "s3cret"
    assert (out / "labels").read_text() == 'app="volumes"'
    assert (out / "ns").read_text() == kube.namespace
    assert (out / "env").read_text() == "blue s3cret volumes volumes\n"
    names = {line.split("=", 1)[0] for line in (out / "environ").read_text().splitlines()}
    assert names <= {"COLOR", "PASSWORD", "POD_NAME", "HOSTNAME", "PATH", "PWD", "SHLVL", "_"}
    token = (out / "token").read_text()
    claims = json.loads(base64.urlsafe_b64decode(token.split(".")[1] + "=="))
    pod = kube.get("pod", "volumes")
    assert pod is not None
    bound = claims["kubernetes.io"]["pod"]
    assert bound == {"name": "volumes", "uid": pod["metadata"]["uid"]}
    assert "s3cret" not in agent.logs()


def test_probes_drive_ready_and_restarts(
    kube: Kube, start_process_agent: StartProcessAgent, reachable_pods_dir: Path
) -> None:
    # http.server serves files by the absolute path of its working directory.
    agent = start_process_agent({"pods_dir": str(reachable_pods_dir)})
    port = free_port()
    script = f"touch alive; exec python3 -m http.server {port} --bind 127.0.0.1"
    fast = {"periodSeconds": 1, "failureThreshold": 1, "timeoutSeconds": 2}
    container = {
        "ports": [{"name": "http", "containerPort": port}],
        "startupProbe": {"tcpSocket": {"port": "http"}, **fast, "failureThreshold": 30},
        "readinessProbe": {"httpGet": {"path": "/ready", "port": port}, **fast},
        "livenessProbe": {"exec": {"command": ["test", "-f", "alive"]}, **fast},
    }
    kube.create(process_pod("probed", agent.node_name, script, "Always", container=container))
    running = wait_for("Running", lambda: phase_is(kube, "probed", "Running"))
    assert status_of(running).get("ready") is False
    root = pod_dir(agent, kube, "probed", reachable_pods_dir) / "containers/app/root"
    (root / "ready").write_text("ok")
    wait_for("Ready", lambda: condition(kube.get("pod", "probed"), "Ready") == "True")
    assert status_of(kube.get("pod", "probed"))["started"] is True
    (root / "ready").unlink()
    wait_for("not Ready", lambda: condition(kube.get("pod", "probed"), "Ready") == "False")
    (root / "alive").unlink()
    restarted = wait_for(
        "restarted by the liveness probe",
        lambda: (
            (p := kube.get("pod", "probed"))
            and status_of(p).get("restartCount", 0) >= 1
            and "running" in status_of(p)["state"]
            and p
        ),
        timeout=30,
    )
    assert status_of(restarted)["lastState"]["terminated"]["reason"] == "Error"


def test_probe_failures_and_liveness_kills_are_events(
    kube: Kube, start_process_agent: StartProcessAgent
) -> None:
    agent = start_process_agent()
    fast = {"periodSeconds": 1, "failureThreshold": 2, "timeoutSeconds": 5}
    container = {
        "livenessProbe": {"exec": {"command": ["sh", "-c", "echo sick; exit 1"]}, **fast},
        "readinessProbe": {"exec": {"command": ["sh", "-c", "echo busy >&2; exit 1"]}, **fast},
    }
    kube.create(process_pod("unwell", agent.node_name, "sleep 3600", "Always", container=container))

    def found(reason: str, message: str) -> dict[str, Any] | None:
        for event in kube.events("unwell"):
            if event["reason"] == reason and event["message"] == message:
                return event
        return None

    killing = wait_for(
        "a Killing Event",
        lambda: found("Killing", "Container app failed liveness probe, will be restarted"),
        timeout=60,
    )
    assert killing["type"] == "Normal"
    assert killing["involvedObject"]["fieldPath"] == "spec.containers{app}"
    liveness = found("Unhealthy", "Liveness probe failed: sick\n")
    assert liveness is not None and liveness["type"] == "Warning"
    assert liveness["count"] >= 2  # one per failed attempt, the same message counted
    assert liveness["involvedObject"]["fieldPath"] == "spec.containers{app}"
    readiness = found("Unhealthy", "Readiness probe failed: busy\n")
    assert readiness is not None and readiness["type"] == "Warning"
    restarted = wait_for(
        "restarted",
        lambda: (p := kube.get("pod", "unwell")) and status_of(p).get("restartCount", 0) >= 1,
        timeout=60,
    )
    assert restarted


def test_delete_sends_sigterm_and_the_pod_goes_within_grace(
    kube: Kube, start_process_agent: StartProcessAgent, shared_dir: Path
) -> None:
    agent = start_process_agent({"host_path_prefixes": [str(shared_dir)]})
    script = (
        "trap 'echo bye > marks/term; exit 0' TERM; echo up > marks/up; while :; do sleep 0.2; done"
    )
    kube.create(
        process_pod(
            "graceful",
            agent.node_name,
            script,
            container={"volumeMounts": [{"name": "marks", "mountPath": "/marks"}]},
            volumes=[{"name": "marks", "hostPath": {"path": str(shared_dir)}}],
            terminationGracePeriodSeconds=20,
        )
    )
    wait_for("Running", lambda: phase_is(kube, "graceful", "Running"))
    wait_for("the trap is set", (shared_dir / "up").exists)
    directory = pod_dir(agent, kube, "graceful")
    started = time.monotonic()
    kube.kubectl("delete", "pod", "graceful", "-n", kube.namespace, "--timeout=60s")
    elapsed = time.monotonic() - started
    assert (shared_dir / "term").read_text() == "bye\n"
    assert elapsed < 10
    assert kube.get("pod", "graceful") is None
    wait_for("pod directory removed", lambda: not directory.exists())


def test_sigkilled_vkpy_adopts_running_and_exited_containers(
    kube: Kube, start_process_agent: StartProcessAgent
) -> None:
    agent = start_process_agent()
    kube.create(process_pod("keeper", agent.node_name, "sleep 3600"))
    kube.create(process_pod("quitter", agent.node_name, "sleep 4; exit 7"))
    wait_for("both Running", lambda: all(kube.phase(n) == "Running" for n in ("keeper", "quitter")))
    before = status_of(kube.get("pod", "keeper"))
    pid = int(before["containerID"].removeprefix("process://"))
    agent.kill()
    os.kill(pid, 0)
    exit_record = pod_dir(agent, kube, "quitter") / "containers/app/instances/0/exit.json"
    wait_for("quitter exits while vkpy is down", exit_record.exists, timeout=20)
    agent.start()
    failed = wait_for("quitter Failed", lambda: phase_is(kube, "quitter", "Failed"), timeout=60)
    assert status_of(failed)["state"]["terminated"]["exitCode"] == 7
    after = status_of(kube.get("pod", "keeper"))
    assert after["containerID"] == before["containerID"]
    assert after["restartCount"] == 0
    assert after["state"]["running"]["startedAt"] == before["state"]["running"]["startedAt"]
    os.kill(pid, 0)
    assert "adopt" in agent.logs() or "process backend ready" in agent.logs()


@pytest.mark.parametrize("enforcement", ["auto", "watchdog"])
def test_memory_hog_is_oom_killed(
    kube: Kube, start_process_agent: StartProcessAgent, enforcement: str
) -> None:
    agent = start_process_agent({"memory_enforcement": enforcement})
    hog = (
        "python3 -c 'import time\nx = []\nwhile True:\n"
        "    x.append(bytearray(8 << 20)); time.sleep(0.01)'"
    )
    limits = {"resources": {"limits": {"memory": "64Mi"}}}
    kube.create(process_pod("hog", agent.node_name, hog, container=limits))
    failed = wait_for("Failed", lambda: phase_is(kube, "hog", "Failed"), timeout=60)
    terminated = status_of(failed)["state"]["terminated"]
    assert terminated["reason"] == "OOMKilled"
    assert terminated["exitCode"] == 137


def test_unrunnable_pods_get_a_reason_and_an_event(
    kube: Kube, start_process_agent: StartProcessAgent
) -> None:
    agent = start_process_agent()
    no_command = process_pod(
        "imageonly", agent.node_name, "", container={"image": "example.com/team/app:1.0"}
    )
    del no_command["spec"]["containers"][0]["command"]
    kube.create(no_command)
    kube.create(
        process_pod(
            "claims",
            agent.node_name,
            "sleep 3600",
            volumes=[{"name": "data", "persistentVolumeClaim": {"claimName": "data"}}],
        )
    )
    kube.create(
        process_pod(
            "hostroot",
            agent.node_name,
            "sleep 3600",
            volumes=[{"name": "etc", "hostPath": {"path": "/etc"}}],
        )
    )
    kube.create(process_pod("missing", agent.node_name, "", container={"command": ["no-such-cmd"]}))
    kube.create(process_pod("healthy", agent.node_name, "sleep 3600"))
    # refused at create: Pending, Waiting with CreateContainerError, never Failed (issue 31)
    image_only = cannot_start(kube, "imageonly")
    assert image_only["reason"] == "CreateContainerError"
    assert image_only["message"].startswith("NoCommand: ")
    assert "has no command" in image_only["message"]
    assert "`images` setting" in image_only["message"]
    claims = cannot_start(kube, "claims")
    assert claims["reason"] == "CreateContainerError"
    assert claims["message"].startswith("UnsupportedVolume: ")
    assert "persistentVolumeClaim" in claims["message"]
    hostroot = cannot_start(kube, "hostroot")
    assert "host_path_prefixes" in hostroot["message"]
    missing = wait_for("Failed", lambda: phase_is(kube, "missing", "Failed"))
    terminated = status_of(missing)["state"]["terminated"]
    assert terminated["reason"] == "ContainerCannotRun"
    assert "no-such-cmd" in terminated["message"]
    for refused, reason in ((image_only, "NoCommand"), (claims, "UnsupportedVolume")):
        assert any(
            e["reason"] == "Failed" and e["message"].startswith(f"Error: {reason}: ")
            for e in refused["events"]
        ), refused["events"]
    for name in ("imageonly", "claims", "hostroot"):
        assert phase_is(kube, name, "Pending"), name
    wait_for("healthy Running", lambda: phase_is(kube, "healthy", "Running"))
    assert agent.alive()


def test_tokens_are_renewed_after_a_restart(
    kube: Kube, start_process_agent: StartProcessAgent
) -> None:
    agent = start_process_agent()
    kube.create(process_pod("tokened", agent.node_name, "sleep 3600"))
    wait_for("Running", lambda: phase_is(kube, "tokened", "Running"))
    volumes = pod_dir(agent, kube, "tokened") / "volumes"
    token_path = next(volumes.glob("kube-api-access-*")) / "token"
    first = token_path.read_text()
    agent.signal(signal.SIGTERM)
    time.sleep(1.1)  # token `iat` has one-second resolution
    agent.start()
    wait_for("a renewed token", lambda: token_path.read_text() != first, timeout=30)
    assert kube.phase("tokened") == "Running"


def test_a_recreated_pod_is_not_hit_by_the_old_deletion(
    kube: Kube, start_process_agent: StartProcessAgent
) -> None:
    agent = start_process_agent()
    slow_stop = "trap 'sleep 4; exit 0' TERM; while :; do sleep 0.2; done"
    first = kube.create(
        process_pod("same", agent.node_name, slow_stop, terminationGracePeriodSeconds=20)
    )
    wait_for("Running", lambda: phase_is(kube, "same", "Running"))
    # vkpy is busy stopping the old pod (its trap takes 4 s) when the object is
    # force-deleted and a new pod of the same name appears: vkpy's final DELETE of the
    # old pod carries the old UID as a precondition and must leave the new one alone.
    kube.kubectl("delete", "pod", "same", "-n", kube.namespace, "--wait=false")
    time.sleep(0.5)
    kube.kubectl("delete", "pod", "same", "-n", kube.namespace, "--force", "--grace-period=0")
    second = kube.create(process_pod("same", agent.node_name, "sleep 3600"))
    assert second["metadata"]["uid"] != first["metadata"]["uid"]
    wait_for("the new pod Running", lambda: phase_is(kube, "same", "Running"))
    time.sleep(6)  # past the old pod's stop and vkpy's DELETE of it
    pod = kube.get("pod", "same")
    assert pod is not None
    assert pod["metadata"]["uid"] == second["metadata"]["uid"]
    assert pod["metadata"].get("deletionTimestamp") is None
    assert pod["status"]["phase"] == "Running"
