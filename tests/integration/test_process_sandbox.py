"""The process backend as a sandbox (issue 12): pods kept apart from each other and
from the host, and security settings refused rather than silently ignored.

Each test reproduces one finding of the security review on the real control plane:
a second pod tries to read, write and signal what belongs to a first one; pods ask
for root, privileges or identities outside the node's range.
"""

# ruff: noqa: F811 - pytest fixtures are imported by name and then requested as arguments
from __future__ import annotations

import json
import os
import re
from pathlib import Path
from typing import Any

import pytest

from tests.integration.agent import Kube, wait_for
from tests.integration.cannot_start import cannot_start
from tests.integration.process_fixtures import (  # noqa: F401 - fixtures
    StartProcessAgent,
    phase_is,
    process_pod,
    reachable_pods_dir,
    shared_dir,
    start_process_agent,
    status_of,
)
from tests.integration.stream_helpers import Terminal, kubectl_env
from vkpy.devcluster import ClusterAccess
from vkpy.providers.process.standins import BUSYBOX_BIN


def _log(pods: Path, kube: Kube, name: str) -> str:
    pod = kube.get("pod", name)
    assert pod is not None
    path = pods / pod["metadata"]["uid"] / "containers/app/instances/0/output.log"
    return "\n".join(line.split(" ", 3)[-1] for line in path.read_text().splitlines())


def _done(pods: Path, kube: Kube, name: str) -> str | None:
    try:
        text = _log(pods, kube, name)
    except OSError:
        return None
    return text if "DONE" in text else None


def uid_in(log: str) -> str:
    """The uid a pod's script printed as `UID=<n>` (its log mixes stdout and stderr)."""
    found = re.search(r"^UID=(\d+)$", log, re.MULTILINE)
    assert found, log
    return found.group(1)


def test_a_pod_cannot_read_write_or_signal_another_pod(
    kube: Kube, start_process_agent: StartProcessAgent, reachable_pods_dir: Path
) -> None:
    pods = reachable_pods_dir
    agent = start_process_agent(config={"pods_dir": str(pods)})
    kube.kubectl(
        "create", "secret", "generic", "creds", "--from-literal=key=s3cret", "-n", kube.namespace
    )
    victim_script = (
        "{ echo hacked > sec/key; } 2>/dev/null && echo SECRET-WRITABLE; "
        "echo mine > scratch/mine && echo EMPTYDIR-OK; "
        "echo READ-$(cat sec/key); echo UID=$(id -u); echo DONE; sleep 3600"
    )
    kube.create(
        process_pod(
            "victim",
            agent.node_name,
            victim_script,
            container={
                "env": [{"name": "TOKEN", "value": "env-s3cret"}],
                "volumeMounts": [
                    {"name": "sec", "mountPath": "/sec"},
                    {"name": "scratch", "mountPath": "/scratch"},
                ],
            },
            volumes=[
                {"name": "sec", "secret": {"secretName": "creds"}},
                {"name": "scratch", "emptyDir": {}},
            ],
        )
    )
    running = wait_for("victim Running", lambda: phase_is(kube, "victim", "Running"))
    victim_log = wait_for("victim's report", lambda: _done(pods, kube, "victim"))
    assert "SECRET-WRITABLE" not in victim_log  # kubelet-made volumes are read-only
    assert "EMPTYDIR-OK" in victim_log and "READ-s3cret" in victim_log
    victim_uid = uid_in(victim_log)
    assert victim_uid.isdigit() and victim_uid not in ("0", "65534")
    pid = status_of(running)["containerID"].removeprefix("process://")
    victim_dir = pods / running["metadata"]["uid"]
    attacker_script = (
        f"cat /proc/{pid}/environ | tr '\\0' '\\n' | grep env-s3cret && echo ENV-READ; "
        f"cat {victim_dir}/volumes/sec/key && echo SECRET-READ; "
        f"echo x > {victim_dir}/volumes/sec/key && echo SECRET-WRITTEN; "
        f"ls /proc/{pid}/cwd/ && echo CWD-READ; "
        f"echo x > {victim_dir}/volumes/scratch/planted && echo EMPTYDIR-WRITTEN; "
        f"kill -0 {pid} && echo SIGNALLED; "
        "echo UID=$(id -u); echo DONE"
    )
    kube.create(process_pod("attacker", agent.node_name, attacker_script))
    attacker_log = wait_for("attacker's report", lambda: _done(pods, kube, "attacker"))
    for found in ("ENV-READ", "SECRET-READ", "SECRET-WRITTEN", "CWD-READ", "SIGNALLED"):
        assert found not in attacker_log, attacker_log
    assert "EMPTYDIR-WRITTEN" not in attacker_log, attacker_log
    attacker_uid = uid_in(attacker_log)
    assert attacker_uid.isdigit() and attacker_uid != victim_uid
    assert not (victim_dir / "volumes/scratch/planted").exists()
    assert (victim_dir / "volumes/sec/key").read_text() == "s3cret"
    assert phase_is(kube, "victim", "Running")


def _refused(kube: Kube, name: str) -> dict[str, Any]:
    """The refused pod: Pending, Waiting with a reason, never Failed (issue 31)."""
    return cannot_start(kube, name)


@pytest.mark.parametrize(
    ("name", "security", "words", "reason"),
    [
        ("privileged", {"privileged": True}, "privileged", "CreateContainerError"),
        ("root", {"runAsUser": 0}, "runAsUser 0", "CreateContainerConfigError"),
        ("caps", {"capabilities": {"add": ["NET_ADMIN"]}}, "NET_ADMIN", "CreateContainerError"),
        ("outside", {"runAsUser": 1000}, "runAsUser 1000", "CreateContainerConfigError"),
    ],
)
def test_security_settings_that_cannot_be_honoured_are_refused(
    kube: Kube,
    start_process_agent: StartProcessAgent,
    name: str,
    security: dict[str, Any],
    words: str,
    reason: str,
) -> None:
    agent = start_process_agent()
    kube.create(
        process_pod(name, agent.node_name, "sleep 3600", container={"securityContext": security})
    )
    refused = _refused(kube, name)
    assert refused["reason"] == reason
    assert words in refused["message"]
    assert any(words in e["message"] for e in refused["events"])


def test_run_as_user_inside_the_range_is_honoured(
    kube: Kube, start_process_agent: StartProcessAgent, reachable_pods_dir: Path
) -> None:
    pods = reachable_pods_dir
    agent = start_process_agent(config={"pods_dir": str(pods), "pod_uid_range": "310000-310099"})
    kube.create(
        process_pod(
            "chosen",
            agent.node_name,
            "id -u; id -g; id -G; echo DONE; sleep 3600",
            securityContext={"runAsUser": 310050, "runAsGroup": 310051, "fsGroup": 310052},
        )
    )
    wait_for("Running", lambda: phase_is(kube, "chosen", "Running"))
    lines = wait_for("report", lambda: _done(pods, kube, "chosen")).split("\n")
    assert lines[0] == "310050"
    assert lines[1] == "310051"
    assert "310052" in lines[2].split()


def test_run_as_non_root_with_user_zero_is_refused_with_an_event(
    kube: Kube, start_process_agent: StartProcessAgent
) -> None:
    agent = start_process_agent()
    kube.create(
        process_pod(
            "nonroot",
            agent.node_name,
            "sleep 3600",
            container={"securityContext": {"runAsNonRoot": True, "runAsUser": 0}},
        )
    )

    def refused() -> list[dict[str, Any]]:
        return [
            e
            for e in kube.events("nonroot")
            if "container's runAsUser breaks non-root policy" in e["message"]
        ]

    events = wait_for("the non-root Event", refused)
    assert events[0]["type"] == "Warning" and events[0]["reason"] == "Failed"
    waiting = status_of(kube.get("pod", "nonroot"))["state"]["waiting"]
    assert waiting["reason"] == "CreateContainerConfigError"


def test_run_as_non_root_follows_the_images_user(
    kube: Kube, start_process_agent: StartProcessAgent, reachable_pods_dir: Path
) -> None:
    """Without a runAsUser, the image's user decides, as with the kubelet: busybox
    (root) is refused with an Event, an image whose `user` is not root runs as it,
    and an entry that says no user (a chart's own image) runs as the pod's own id."""
    pods = reachable_pods_dir
    images = {
        "example.com/nonroot": {"cmd": ["sh"], "path": [BUSYBOX_BIN], "user": 310007},
        "example.com/unsaid": {"cmd": ["sh"], "path": [BUSYBOX_BIN]},
    }
    agent = start_process_agent(
        config={"pods_dir": str(pods), "pod_uid_range": "310000-310099", "images": images}
    )
    non_root = {"securityContext": {"runAsNonRoot": True}}
    kube.create(process_pod("as-root", agent.node_name, "id -u", container=non_root))
    user = {**non_root, "image": "example.com/nonroot:1"}
    kube.create(process_pod("as-image", agent.node_name, "id -u; echo DONE", container=user))
    unsaid = {**non_root, "image": "example.com/unsaid:1"}
    kube.create(process_pod("as-own", agent.node_name, "id -u; echo DONE", container=unsaid))

    def refused() -> list[dict[str, Any]]:
        return [e for e in kube.events("as-root") if "image will run as root" in e["message"]]

    events = wait_for("the non-root Event", refused)
    assert events[0]["type"] == "Warning" and events[0]["reason"] == "Failed"
    waiting = status_of(kube.get("pod", "as-root"))["state"]["waiting"]
    assert waiting["reason"] == "CreateContainerConfigError"
    assert wait_for("report", lambda: _done(pods, kube, "as-image")).split("\n")[0] == "310007"
    own = int(wait_for("report", lambda: _done(pods, kube, "as-own")).split("\n")[0])
    assert 310000 <= own <= 310099 and own != 310007


def test_two_nodes_sharing_a_state_directory_keep_each_others_pods(
    kube: Kube, start_process_agent: StartProcessAgent
) -> None:
    first = start_process_agent()
    kube.create(process_pod("first", first.node_name, "sleep 3600"))
    running = wait_for("first Running", lambda: phase_is(kube, "first", "Running"))
    pid = int(status_of(running)["containerID"].removeprefix("process://"))
    pods = first.state_dir / "process" / "pods"
    second = start_process_agent(args=[f"--state-dir={first.state_dir}"])
    kube.create(process_pod("second", second.node_name, "sleep 3600"))
    wait_for("second Running", lambda: phase_is(kube, "second", "Running"))
    wait_for("second's backend ready", lambda: "process backend ready" in second.logs())
    assert (pods / running["metadata"]["uid"]).is_dir()
    assert Path(f"/proc/{pid}").exists()
    assert "pod stopped and removed" not in second.logs()
    assert phase_is(kube, "first", "Running")
    # and the first node, restarted, leaves the second's pod alone too
    first.stop()
    first.start()
    wait_for(
        "first's backend ready again", lambda: first.logs().count("process backend ready") == 2
    )
    second_pod = kube.get("pod", "second")
    assert second_pod is not None
    assert (pods / second_pod["metadata"]["uid"]).is_dir()
    assert phase_is(kube, "second", "Running") and phase_is(kube, "first", "Running")


def test_a_sub_path_through_a_planted_link_is_refused(
    kube: Kube, start_process_agent: StartProcessAgent, shared_dir: Path, tmp_path: Path
) -> None:
    root_owned = tmp_path / "root-owned"
    root_owned.mkdir(mode=0o755)
    agent = start_process_agent(config={"host_path_prefixes": [str(shared_dir)]})
    host = {"name": "hp", "hostPath": {"path": str(shared_dir), "type": "Directory"}}
    kube.create(
        process_pod(
            "planter",
            agent.node_name,
            f"ln -s {root_owned} hp/z && echo planted",
            container={"volumeMounts": [{"name": "hp", "mountPath": "/hp"}]},
            volumes=[host],
        )
    )
    wait_for("planter done", lambda: phase_is(kube, "planter", "Succeeded"))
    assert (shared_dir / "z").is_symlink()
    kube.create(
        process_pod(
            "escaper",
            agent.node_name,
            "echo x > conf/evil.conf",
            container={
                "volumeMounts": [{"name": "hp", "mountPath": "/conf", "subPath": "z/conf.d"}]
            },
            volumes=[host],
        )
    )
    refused = _refused(kube, "escaper")
    assert "symbolic link" in refused["message"]
    assert any("symbolic link" in e["message"] for e in refused["events"])
    assert not (root_owned / "conf.d").exists()


def test_kubectl_run_it_gets_a_prompt(
    kube: Kube, cluster: ClusterAccess, start_process_agent: StartProcessAgent
) -> None:
    """Finding 6: a `tty: true` container runs on a terminal, so its shell prompts."""
    agent = start_process_agent()
    overrides = {
        "apiVersion": "v1",
        "spec": {"nodeName": agent.node_name, "tolerations": [{"operator": "Exists"}]},
    }
    argv = cluster.kubectl_argv(
        *("run", "shell", "-it", "-n", kube.namespace, "--image=busybox"),
        *("--restart=Never", f"--overrides={json.dumps(overrides)}", "--command", "--", "sh"),
    )
    terminal = Terminal(argv, kubectl_env(cluster), rows=30, cols=100)
    try:
        terminal.expect("If you don't see a command prompt", timeout=60)
        terminal.send("\r")
        terminal.expect(r"[$#] $")
        terminal.send("echo $((6*7)); [ -t 0 ] && echo on-a-terminal\r")
        answer = terminal.expect(r"\non-a-terminal\r\n")
        assert re.search(r"[\r\n]42\r\non-a-terminal\r\n", answer), answer
        terminal.send("exit\r")
        terminal.wait()
    finally:
        terminal.kill()
    wait_for(
        "the shell's end reported",
        lambda: status_of(kube.get("pod", "shell"), "shell").get("state", {}).get("terminated"),
    )


def test_a_pod_has_its_own_hostname_and_ipc_shared_by_its_containers(
    kube: Kube,
    cluster: ClusterAccess,
    start_process_agent: StartProcessAgent,
    reachable_pods_dir: Path,
) -> None:
    pods = reachable_pods_dir
    agent = start_process_agent(config={"pods_dir": str(pods)})
    report = (
        "hostname; readlink /proc/self/ns/ipc; readlink /proc/self/ns/uts; echo DONE; sleep 3600"
    )
    pod = process_pod("named", agent.node_name, report)
    pod["spec"]["containers"].append(
        {"name": "other", "image": "busybox", "command": ["sh", "-c", report]}
    )
    kube.create(pod)
    wait_for("Running", lambda: phase_is(kube, "named", "Running"))
    app = wait_for("app's report", lambda: _done(pods, kube, "named")).split("\n")
    assert app[0] == "named"
    assert app[1] != os.readlink("/proc/self/ns/ipc") and app[2] != os.readlink("/proc/self/ns/uts")
    uid = (kube.get("pod", "named") or {})["metadata"]["uid"]
    other = pods / uid / "containers/other/instances/0/output.log"
    wait_for("other's report", lambda: other.exists() and "DONE" in other.read_text())
    lines = [line.split(" ", 3)[-1] for line in other.read_text().splitlines()]
    assert lines[:3] == app[:3]  # one hostname, one IPC namespace for the whole pod
    exec_hostname = kube.kubectl(
        "exec", "-n", kube.namespace, "named", "-c", "app", "--", "hostname"
    )
    assert exec_hostname.strip() == "named"
