"""`runtime: oci` volumes as a pod in a user namespace of its own sees them: a real
vkpy node on the local control plane runs busybox from a real registry on loopback
through runc, and the pod itself reports (`stat`, `mount`, `cat`) what the
Kubernetes conformance specs check: owner, group (fsGroup), mode, a Memory emptyDir
on tmpfs, a 0400 secret readable by the pod's root or, with an fsGroup, by a
non-root member of it, and the pod's sysctls."""

# ruff: noqa: F811 - pytest fixtures are imported by name and then requested as arguments
from __future__ import annotations

import base64
import os
from pathlib import Path
from typing import Any

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
)
from tests.integration.process_fixtures import (  # noqa: F401 - fixtures
    StartProcessAgent,
    reachable_pods_dir,
    start_process_agent,
)
from tests.registry import Registry

pytestmark = ROOT_ONLY


def secret(name: str, data: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {"name": name},
        "data": {"data-1": base64.b64encode(data.encode()).decode()},
    }


def config_map(name: str, data: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": name},
        "data": {"data-1": data},
    }


def report(kube: Kube, name: str) -> dict[str, str]:
    """The pod's `key: value` lines up to its `done` line."""
    wait_for(f"{name}'s report", lambda: "done" in logs(kube, name), timeout=60)
    lines = logs(kube, name).splitlines()
    return dict(line.split(": ", 1) for line in lines if ": " in line)


def tmpfs_mounts() -> list[str]:
    return [line for line in Path("/proc/mounts").read_text().splitlines() if " tmpfs " in line]


def test_volumes_of_a_root_pod_are_its_roots_with_the_modes_asked_for(
    kube: Kube,
    start_process_agent: StartProcessAgent,
    registry: Registry,
    reachable_pods_dir: Path,
) -> None:
    agent = start_process_agent(oci_config(registry, reachable_pods_dir))
    kube.create(secret("root-secret", "secret-value-1"))
    kube.create(config_map("root-config", "config-value-1"))
    script = "; ".join(
        [
            'echo "secret: $(stat -L -c "%u %g %a" /secret/data-1)"',
            'echo "secret content: $(cat /secret/data-1)"',
            'echo "projected: $(stat -L -c "%u %g %a" /projected/path/to/data-2)"',
            'echo "projected content: $(cat /projected/path/to/data-2)"',
            'echo "memory: $(stat -c "%u %g %a" /memory)"',
            'echo "memory mount: $(grep " /memory " /proc/mounts)"',
            'echo "disk: $(stat -c "%u %g %a" /disk)"',
            "umask 022; echo new > /memory/file",
            'echo "memory file: $(stat -c "%u %g %a" /memory/file)"',
            "echo done; sleep 3600",
        ]
    )
    manifest = busybox_pod(
        "vols-root",
        agent.node_name,
        f"{registry.host}/library/busybox:latest",
        command=["sh", "-c", script],
        volumeMounts=[
            {"name": "secret", "mountPath": "/secret"},
            {"name": "projected", "mountPath": "/projected"},
            {"name": "memory", "mountPath": "/memory"},
            {"name": "disk", "mountPath": "/disk"},
        ],
    )
    manifest["spec"]["volumes"] = [
        {"name": "secret", "secret": {"secretName": "root-secret", "defaultMode": 0o400}},
        {
            "name": "projected",
            "projected": {
                "sources": [
                    {
                        "configMap": {
                            "name": "root-config",
                            "items": [{"key": "data-1", "path": "path/to/data-2", "mode": 0o400}],
                        }
                    }
                ]
            },
        },
        {"name": "memory", "emptyDir": {"medium": "Memory", "sizeLimit": "64Mi"}},
        {"name": "disk", "emptyDir": {}},
    ]
    uid = kube.create(manifest)["metadata"]["uid"]
    seen = report(kube, "vols-root")
    assert seen["secret"] == "0 0 400"
    assert seen["secret content"] == "secret-value-1"
    assert seen["projected"] == "0 0 400"
    assert seen["projected content"] == "config-value-1"
    assert seen["memory"] == "0 0 1777"
    assert seen["memory mount"].split()[2] == "tmpfs"
    assert "size=65536k" in seen["memory mount"]
    assert seen["disk"] == "0 0 777"
    assert seen["memory file"] == "0 0 644"
    assert [m for m in tmpfs_mounts() if uid in m]  # mounted for the pod on the host

    kubectl(kube, "delete", "pod", "vols-root", "--wait=true", "--timeout=60s")
    wait_for("nothing left", lambda: not (reachable_pods_dir / uid).exists(), timeout=30)
    assert not [m for m in tmpfs_mounts() if uid in m]


def test_an_fs_group_owns_the_volumes_of_a_non_root_pod_and_its_sysctls_are_set(
    kube: Kube,
    start_process_agent: StartProcessAgent,
    registry: Registry,
    reachable_pods_dir: Path,
) -> None:
    agent = start_process_agent(oci_config(registry, reachable_pods_dir))
    kube.create(secret("group-secret", "secret-value-2"))
    script = "; ".join(
        [
            'echo "id: $(id -u) $(id -G)"',
            'echo "secret: $(stat -L -c "%u %g %a" /secret/data-1)"',
            'echo "secret content: $(cat /secret/data-1)"',
            'echo "memory: $(stat -c "%u %g %a" /memory)"',
            'echo "sub: $(stat -c "%u %g %a" /sub)"',
            'echo "disk: $(stat -c "%u %g %a" /disk)"',
            "umask 0; echo new > /memory/file; chmod 0660 /memory/file",
            'echo "memory file: $(stat -c "%u %g %a" /memory/file)"',
            'echo "memory file content: $(cat /memory/file)"',
            'echo "shm_rmid_forced: $(cat /proc/sys/kernel/shm_rmid_forced)"',
            "echo done; sleep 3600",
        ]
    )
    manifest = busybox_pod(
        "vols-group",
        agent.node_name,
        f"{registry.host}/library/busybox:latest",
        command=["sh", "-c", script],
        volumeMounts=[
            {"name": "secret", "mountPath": "/secret"},
            {"name": "memory", "mountPath": "/memory"},
            {"name": "memory", "mountPath": "/sub", "subPath": "test-sub"},
            {"name": "disk", "mountPath": "/disk"},
        ],
    )
    manifest["spec"]["securityContext"] = {
        "runAsUser": 1000,
        "fsGroup": 123,
        "sysctls": [{"name": "kernel/shm_rmid_forced", "value": "1"}],
    }
    manifest["spec"]["volumes"] = [
        {"name": "secret", "secret": {"secretName": "group-secret", "defaultMode": 0o400}},
        {"name": "memory", "emptyDir": {"medium": "Memory"}},
        {"name": "disk", "emptyDir": {}},
    ]
    kube.create(manifest)
    seen = report(kube, "vols-group")
    assert seen["id"].split()[0] == "1000" and "123" in seen["id"].split()[1:]
    assert seen["secret"] == "0 123 440"  # group-readable for the fsGroup, as the kubelet
    assert seen["secret content"] == "secret-value-2"
    assert seen["memory"] == "0 123 3777"
    assert seen["sub"] == "0 123 3777"  # the volume's mode, as the kubelet makes a subPath
    assert seen["disk"] == "0 123 2777"
    assert seen["memory file"] == "1000 123 660"  # the setgid directory's group
    assert seen["memory file content"] == "new"
    assert seen["shm_rmid_forced"] == "1"


def test_a_host_path_is_id_mapped_to_the_pod_as_with_host_users_false(
    kube: Kube,
    start_process_agent: StartProcessAgent,
    registry: Registry,
    reachable_pods_dir: Path,
    tmp_path: Path,
) -> None:
    """As Kubernetes mounts a `hostUsers: false` pod's volumes: id-mapped through the
    pod's user namespace, so the pod's root writes where the host's root may, and what
    it writes is the host root's (the conformance spec "HostPath should support
    subPath": a privileged container writes into a subPath of /tmp, which the node
    made, root's). The container's processes stay the pod's ids, not the host's root."""
    allowed = tmp_path / "allowed"
    (allowed / "sub-path").mkdir(parents=True)
    os.chmod(allowed / "sub-path", 0o755)
    (allowed / "sub-path" / "old").write_text("the host root's file\n")
    agent = start_process_agent(
        {**oci_config(registry, reachable_pods_dir), "host_path_prefixes": [str(allowed)]}
    )
    script = "; ".join(
        [
            "echo new > /vol/test-file",
            "echo changed > /vol/old",
            'echo "written: $(stat -c "%u %g" /vol/test-file)"',
            "echo made > /made/file",
            'echo "made: $(stat -c "%u %g %a" /made)"',
            "echo done; sleep 3600",
        ]
    )
    manifest = busybox_pod(
        "hostpath",
        agent.node_name,
        f"{registry.host}/library/busybox:latest",
        command=["sh", "-c", script],
        volumeMounts=[
            {"name": "host", "mountPath": "/vol", "subPath": "sub-path"},
            {"name": "host", "mountPath": "/made", "subPath": "not/there"},
        ],
    )
    manifest["spec"]["volumes"] = [{"name": "host", "hostPath": {"path": str(allowed)}}]
    uid = kube.create(manifest)["metadata"]["uid"]
    seen = report(kube, "hostpath")
    assert seen["written"] == "0 0"
    assert (allowed / "sub-path" / "old").read_text() == "changed\n"
    written = (allowed / "sub-path" / "test-file").stat()
    assert (written.st_uid, written.st_gid) == (0, 0)  # the host root's, as with the kubelet
    made = (allowed / "not" / "there").stat()  # made by the node, as the kubelet makes it
    assert (made.st_uid, oct(made.st_mode & 0o777)) == (0, oct(os.stat(allowed).st_mode & 0o777))
    assert seen["made"].split()[:2] == ["0", "0"]
    assert (allowed / "not" / "there" / "file").stat().st_uid == 0
    assert host_uid(container_pid(agent, f"vkpy-{uid}-app-0")) != 0
