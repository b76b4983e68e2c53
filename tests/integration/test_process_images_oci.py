"""`runtime: oci` on the process backend, as a user sees it: a real vkpy node on the
local control plane runs busybox pulled from a real registry (Debian's
docker-registry on loopback, the image built with umoci: tests/registry.py) through
runc, in a user namespace of its own. Checked through kubectl and on the host."""

# ruff: noqa: F811 - pytest fixtures are imported by name and then requested as arguments
from __future__ import annotations

import base64
import json
import os
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.integration.agent import Kube, wait_for
from tests.integration.oci_fixtures import (  # noqa: F401 - registry: a fixture
    ROOT_ONLY,
    busybox_pod,
    container_pid,
    host_uid,
    kubectl,
    logs,
    oci_config,
    registry,
    runc_ids,
    runc_root,
)
from tests.integration.process_fixtures import (  # noqa: F401 - fixtures
    StartProcessAgent,
    reachable_pods_dir,
    start_process_agent,
    status_of,
)
from tests.integration.test_kubelet_api import (  # noqa: F401 - rbac_cleanup: a fixture
    kubelet,
    rbac_cleanup,
    service_account,
)
from tests.registry import Registry, busybox_layout
from vkpy.providers.process import leftovers
from vkpy.providers.process.ocipods import cgroup_dirs_of

pytestmark = ROOT_ONLY


def gone(pid: int) -> bool:
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return True
    return "State:\tZ" in status  # a zombie holds nothing, and is reaped


def waiting_reason(kube: Kube, name: str) -> str | None:
    state = status_of(kube.get("pod", name)).get("state") or {}
    return (state.get("waiting") or {}).get("reason")


@pytest.fixture
def host_secret() -> Iterator[Path]:
    directory = Path(tempfile.mkdtemp(prefix="vkpy-secret-", dir="/var/tmp"))
    directory.chmod(0o755)
    secret = directory / "host-secret"
    secret.write_text("host only\n")
    secret.chmod(0o644)
    yield secret
    secret.unlink()
    directory.rmdir()


def test_busybox_runs_as_root_in_its_pod_and_a_mapped_id_on_the_host(
    kube: Kube,
    start_process_agent: StartProcessAgent,
    registry: Registry,
    reachable_pods_dir: Path,
    host_secret: Path,
) -> None:
    agent = start_process_agent(oci_config(registry, reachable_pods_dir))
    node = wait_for("the Node", lambda: kube.get("node", agent.node_name, namespaced=False))
    assert node is not None and node["metadata"]["labels"]["vkpy.io/runtime"] == "oci"
    image = f"{registry.host}/library/busybox:latest"
    script = f"id -u; cat {host_secret}; echo from-root > /data/made; echo checked; sleep 3600"
    manifest = busybox_pod(
        "box",
        agent.node_name,
        image,
        command=["sh", "-c", script],
        volumeMounts=[{"name": "scratch", "mountPath": "/data"}],
    )
    manifest["spec"]["volumes"] = [{"name": "scratch", "emptyDir": {}}]
    created = kube.create(manifest)
    uid = created["metadata"]["uid"]
    wait_for("box Running", lambda: kube.phase("box") == "Running", timeout=60)
    wait_for("its log", lambda: "checked" in kubectl(kube, "logs", "box"))
    log = kubectl(kube, "logs", "box")
    assert log.splitlines()[0] == "0"
    assert "host only" not in log
    assert "No such file or directory" in log
    status = status_of(kube.get("pod", "box"))
    assert status["imageID"].startswith(f"{registry.host}/library/busybox@sha256:")
    pid = container_pid(agent, f"vkpy-{uid}-app-0")
    mapped = host_uid(pid)
    assert mapped >= 1_000_000  # root in the pod is an unprivileged id on the host
    made = reachable_pods_dir / uid / "volumes" / "scratch" / "made"
    assert made.read_text() == "from-root\n"
    assert made.stat().st_uid == mapped  # written through the emptyDir's bind mount
    assert kubectl(kube, "exec", "box", "--", "id", "-u").strip() == "0"
    assert kubectl(kube, "exec", "box", "--", "cat", "/proc/self/uid_map").split() == [
        "0",
        str(mapped),
        "65536",
    ]
    events = [event["reason"] for event in kube.events("box")]
    assert "Pulling" in events and "Pulled" in events

    kubectl(kube, "delete", "pod", "box", "--wait=true", "--timeout=60s")
    wait_for("nothing left", lambda: not (reachable_pods_dir / uid).exists(), timeout=30)
    assert not [name for name in runc_ids(agent) if uid in name]
    assert cgroup_dirs_of(uid) == []
    wait_for("the container's process gone", lambda: gone(pid), timeout=10)


def test_a_missing_image_waits_with_err_image_pull_then_back_off(
    kube: Kube,
    start_process_agent: StartProcessAgent,
    registry: Registry,
    reachable_pods_dir: Path,
) -> None:
    agent = start_process_agent(oci_config(registry, reachable_pods_dir))
    missing = f"{registry.host}/library/nothing-here:1"
    kube.create(busybox_pod("missing", agent.node_name, missing))
    never = f"{registry.host}/library/busybox:never-pulled"
    kube.create(busybox_pod("never", agent.node_name, never, imagePullPolicy="Never"))
    wait_for("ErrImagePull", lambda: waiting_reason(kube, "missing") == "ErrImagePull", timeout=60)
    wait_for(
        "ImagePullBackOff",
        lambda: waiting_reason(kube, "missing") == "ImagePullBackOff",
        timeout=30,
    )
    assert kube.phase("missing") == "Pending"
    reasons = [event["reason"] for event in kube.events("missing")]
    assert "Pulling" in reasons and "Failed" in reasons and "BackOff" in reasons
    wait_for(
        "ErrImageNeverPull",
        lambda: waiting_reason(kube, "never") == "ErrImageNeverPull",
        timeout=30,
    )
    assert kube.phase("never") == "Pending"
    assert not [e for e in kube.events("never") if e["reason"] == "Pulling"]
    for name in ("missing", "never"):
        kubectl(kube, "delete", "pod", name, "--wait=true", "--timeout=60s")


def test_a_sigkilled_vkpy_adopts_its_running_oci_pods(
    kube: Kube,
    start_process_agent: StartProcessAgent,
    registry: Registry,
    reachable_pods_dir: Path,
    rbac_cleanup: None,
) -> None:
    agent = start_process_agent(oci_config(registry, reachable_pods_dir))
    image = f"{registry.host}/library/busybox:latest"
    created = kube.create(
        busybox_pod("kept", agent.node_name, image, command=["sh", "-c", "echo up; sleep 3600"])
    )
    uid = created["metadata"]["uid"]
    wait_for("kept Running", lambda: kube.phase("kept") == "Running", timeout=60)
    before = status_of(kube.get("pod", "kept"))
    pid = container_pid(agent, f"vkpy-{uid}-app-0")
    agent.kill()
    os.kill(pid, 0)
    agent.start()
    wait_for("adopted", lambda: "process backend ready" in agent.logs(), timeout=60)
    after = status_of(kube.get("pod", "kept"))
    assert after["containerID"] == before["containerID"]
    assert after["restartCount"] == 0
    assert after["state"]["running"]["startedAt"] == before["state"]["running"]["startedAt"]
    assert container_pid(agent, f"vkpy-{uid}-app-0") == pid
    again = kube.cluster.run_kubectl
    wait_for(
        "exec after the restart",
        lambda: (
            again(
                "-n", kube.namespace, "exec", "kept", "--", "echo", "still", check=False
            ).stdout.strip()
            == "still"
        ),
        timeout=60,
    )
    token = service_account(kube, "scraper", ["stats"])

    def kept_memory() -> int:
        reply = kubelet(agent.port, "/stats/summary", token=token)
        for pod in json.loads(reply.body or b"{}").get("pods") or []:
            if pod["podRef"]["name"] == "kept":
                for container in pod.get("containers") or []:
                    return int((container.get("memory") or {}).get("workingSetBytes") or 0)
        return 0

    # Measured in the container's own cgroup (runc's), which run.json records.
    run = json.loads((reachable_pods_dir / uid / "containers/app/instances/0/run.json").read_text())
    assert str(pid) in (Path(run["cgroup"]) / "cgroup.procs").read_text().split()
    assert wait_for("stats of kept", kept_memory, timeout=60) > 0
    kubectl(kube, "delete", "pod", "kept", "--wait=true", "--timeout=60s")
    assert not [name for name in runc_ids(agent) if uid in name]


def test_a_private_image_is_pulled_with_the_pods_image_pull_secret(
    kube: Kube,
    start_process_agent: StartProcessAgent,
    tmp_path_factory: pytest.TempPathFactory,
    reachable_pods_dir: Path,
    registry: Registry,
) -> None:
    private = Registry(tmp_path_factory.mktemp("private"), "puller", "s3cret-pull").start()
    try:
        private.push(busybox_layout(), "team/box:1")
        agent = start_process_agent(oci_config(private, reachable_pods_dir, sandbox=registry))
        image = f"{private.host}/team/box:1"
        auth = base64.b64encode(b"puller:s3cret-pull").decode()
        config = {
            "auths": {private.host: {"username": "puller", "password": "s3cret-pull", "auth": auth}}
        }
        kube.create(
            {
                "apiVersion": "v1",
                "kind": "Secret",
                "metadata": {"name": "pull"},
                "type": "kubernetes.io/dockerconfigjson",
                "data": {
                    ".dockerconfigjson": base64.b64encode(json.dumps(config).encode()).decode()
                },
            }
        )
        with_secret = busybox_pod("with", agent.node_name, image, command=["sleep", "3600"])
        with_secret["spec"]["imagePullSecrets"] = [{"name": "pull"}]
        kube.create(with_secret)
        # Always: the image is in the node's store now (IfNotPresent would use it, as
        # the kubelet does); the registry must be asked, and refuses without the secret.
        without = busybox_pod(
            "without", agent.node_name, image, command=["sleep", "3600"], imagePullPolicy="Always"
        )
        kube.create(without)
        wait_for("with Running", lambda: kube.phase("with") == "Running", timeout=60)
        wait_for(
            "without: ErrImagePull or ImagePullBackOff",
            lambda: waiting_reason(kube, "without") in ("ErrImagePull", "ImagePullBackOff"),
            timeout=60,
        )
        failed = [e["message"] for e in kube.events("without") if e["reason"] == "Failed"]
        assert any("unauthorized" in message or "authentication" in message for message in failed)
        assert not any("s3cret-pull" in message for message in failed)
        assert "s3cret-pull" not in agent.logs()
        for name in ("with", "without"):
            kubectl(kube, "delete", "pod", name, "--wait=true", "--timeout=60s")
    finally:
        private.stop()


def test_exec_probes_and_hooks_run_inside_the_container_not_on_the_host(
    kube: Kube,
    start_process_agent: StartProcessAgent,
    registry: Registry,
    reachable_pods_dir: Path,
) -> None:
    agent = start_process_agent(oci_config(registry, reachable_pods_dir))
    image = f"{registry.host}/library/busybox:latest"
    marker = f"vkpy-hooked-{os.getpid()}"
    manifest = busybox_pod(
        "probed",
        agent.node_name,
        image,
        command=["sh", "-c", "touch /made-in-pod; sleep 3600"],
        readinessProbe={
            "exec": {"command": ["sh", "-c", 'test -f /made-in-pod && test "$(id -u)" = 0']},
            "periodSeconds": 1,
        },
        lifecycle={"postStart": {"exec": {"command": ["sh", "-c", f"id -u > /{marker}"]}}},
    )
    created = kube.create(manifest)
    uid = created["metadata"]["uid"]
    wait_for("probed Ready", lambda: status_of(kube.get("pod", "probed")).get("ready"), timeout=60)
    hooked = reachable_pods_dir / uid / "containers" / "app" / "rootfs" / marker
    assert hooked.read_text() == "0\n"  # root in the pod, in the pod's own root
    assert not Path(f"/{marker}").exists()  # never the host's root
    kubectl(kube, "delete", "pod", "probed", "--wait=true", "--timeout=60s")


def test_attach_writes_to_the_stdin_of_an_oci_container(
    kube: Kube,
    start_process_agent: StartProcessAgent,
    registry: Registry,
    reachable_pods_dir: Path,
) -> None:
    agent = start_process_agent(oci_config(registry, reachable_pods_dir))
    image = f"{registry.host}/library/busybox:latest"
    script = "echo waiting; read line; echo got-$line; sleep 3600"
    kube.create(
        busybox_pod("reader", agent.node_name, image, command=["sh", "-c", script], stdin=True)
    )
    wait_for("reader waiting", lambda: "waiting" in logs(kube, "reader"), timeout=60)
    kube.cluster.run_kubectl(
        "-n", kube.namespace, "attach", "-i", "reader", input="hello\n", check=False
    )
    wait_for("the line read", lambda: "got-hello" in logs(kube, "reader"), timeout=20)
    kubectl(kube, "delete", "pod", "reader", "--wait=true", "--timeout=60s")


def test_a_container_over_its_memory_limit_is_oom_killed(
    kube: Kube,
    start_process_agent: StartProcessAgent,
    registry: Registry,
    reachable_pods_dir: Path,
) -> None:
    agent = start_process_agent(oci_config(registry, reachable_pods_dir))
    image = f"{registry.host}/library/busybox:latest"
    hog = "x=$(head -c 200000000 /dev/zero | tr '\\0' a); echo survived"
    created = kube.create(
        busybox_pod(
            "hog",
            agent.node_name,
            image,
            command=["sh", "-c", hog],
            resources={"limits": {"memory": "32Mi"}},
        )
    )
    uid = created["metadata"]["uid"]

    def terminated() -> dict[str, Any] | None:
        state = status_of(kube.get("pod", "hog")).get("state") or {}
        return state.get("terminated")

    ended = wait_for("hog terminated", terminated, timeout=90)
    assert ended["reason"] == "OOMKilled"
    assert "survived" not in logs(kube, "hog")
    kubectl(kube, "delete", "pod", "hog", "--wait=true", "--timeout=60s")
    wait_for("nothing left", lambda: not (reachable_pods_dir / uid).exists(), timeout=30)
    assert not [name for name in runc_ids(agent) if uid in name]
    assert cgroup_dirs_of(uid) == []


def test_run_as_non_root_on_a_root_image_waits_with_create_container_config_error(
    kube: Kube,
    start_process_agent: StartProcessAgent,
    registry: Registry,
    reachable_pods_dir: Path,
) -> None:
    agent = start_process_agent(oci_config(registry, reachable_pods_dir))
    image = f"{registry.host}/library/busybox:latest"
    rooted = busybox_pod(
        "rooted",
        agent.node_name,
        image,
        command=["sleep", "3600"],
        securityContext={"runAsNonRoot": True},
    )
    mapped = busybox_pod(
        "mapped",
        agent.node_name,
        image,
        command=["sh", "-c", "id -u; id -G; sleep 3600"],
        securityContext={"runAsNonRoot": True, "runAsUser": 10001, "runAsGroup": 3000},
    )
    mapped["spec"]["securityContext"] = {"fsGroup": 2000, "supplementalGroups": [4000]}
    kube.create(rooted)
    kube.create(mapped)
    wait_for(
        "CreateContainerConfigError",
        lambda: waiting_reason(kube, "rooted") == "CreateContainerConfigError",
        timeout=60,
    )
    assert kube.phase("rooted") == "Pending"
    # Ids a `host` node would refuse (outside its pod id range) run, in the pod's range.
    wait_for("mapped Running", lambda: kube.phase("mapped") == "Running", timeout=60)
    wait_for("its ids", lambda: "10001" in logs(kube, "mapped"), timeout=30)
    lines = logs(kube, "mapped").splitlines()
    assert lines[0] == "10001"
    assert sorted(lines[1].split()) == ["2000", "3000", "4000"]
    for name in ("rooted", "mapped"):
        kubectl(kube, "delete", "pod", name, "--wait=true", "--timeout=60s")


def test_a_node_taken_down_for_good_leaves_no_oci_container(
    kube: Kube,
    start_process_agent: StartProcessAgent,
    registry: Registry,
    reachable_pods_dir: Path,
) -> None:
    agent = start_process_agent(oci_config(registry, reachable_pods_dir))
    image = f"{registry.host}/library/busybox:latest"
    created = kube.create(busybox_pod("left", agent.node_name, image, command=["sleep", "3600"]))
    uid = created["metadata"]["uid"]
    wait_for("left Running", lambda: kube.phase("left") == "Running", timeout=60)
    pid = container_pid(agent, f"vkpy-{uid}-app-0")
    agent.stop()  # vkpy leaves its pods running for the next start to adopt
    assert not gone(pid)
    leftovers.end_pods(reachable_pods_dir)  # what `make down` and test teardowns run
    wait_for("the container's process gone", lambda: gone(pid), timeout=10)
    assert runc_ids(agent) == []
    assert cgroup_dirs_of(uid) == []
