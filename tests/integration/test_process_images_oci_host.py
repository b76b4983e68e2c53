"""`hostUsers: true`, `hostNetwork`, `hostPID`, `hostIPC` and `privileged` in
`runtime: oci` pods: refused (Pending, never Failed) on a node whose `allow` setting
does not list them; on one that does, the container really is in the host's
namespace, checked from the host by the namespaces of runc's container process."""

# ruff: noqa: F811 - pytest fixtures are imported by name and then requested as arguments
from __future__ import annotations

import os
import socket
from pathlib import Path
from typing import Any

from tests.integration.agent import Kube, wait_for
from tests.integration.oci_fixtures import (  # noqa: F401 - registry: a fixture
    ROOT_ONLY,
    busybox_pod,
    container_pid,
    host_uid,
    logs,
    oci_config,
    registry,
)
from tests.integration.process_fixtures import (  # noqa: F401 - fixtures
    StartProcessAgent,
    reachable_pods_dir,
    start_process_agent,
    status_of,
)
from tests.registry import Registry

pytestmark = ROOT_ONLY

ASKS: dict[str, tuple[dict[str, Any], dict[str, Any], str]] = {
    # name: (pod spec fields, container fields, the allowance the refusal names)
    "users": ({"hostUsers": True}, {}, "hostUsers"),
    "net": ({"hostNetwork": True}, {}, "hostNetwork"),
    "pids": ({"hostPID": True}, {}, "hostPID"),
    "ipc": ({"hostIPC": True}, {}, "hostIPC"),
    "priv": ({}, {"securityContext": {"privileged": True}}, "privileged"),
}


def asking(name: str, node: str, image: str, script: str) -> dict[str, Any]:
    pod_fields, container_fields, _ = ASKS[name]
    manifest = busybox_pod(name, node, image, command=["sh", "-c", script], **container_fields)
    manifest["spec"].update(pod_fields)
    return manifest


def namespace_of(pid: int | str, kind: str) -> str:
    return os.readlink(f"/proc/{pid}/ns/{kind}")


def test_host_access_is_refused_where_the_node_does_not_allow_it(
    kube: Kube,
    start_process_agent: StartProcessAgent,
    registry: Registry,
    reachable_pods_dir: Path,
) -> None:
    config = oci_config(registry, reachable_pods_dir)
    config["allow"] = ["hostPID"]  # hostPID alone: it needs the host's users as well
    agent = start_process_agent(config)
    image = f"{registry.host}/library/busybox:latest"
    for name in ASKS:
        kube.create(asking(name, agent.node_name, image, "sleep 3600"))

    def refused(name: str) -> dict[str, Any] | None:
        waiting = (status_of(kube.get("pod", name)).get("state") or {}).get("waiting") or {}
        return waiting if waiting.get("reason") == "CreateContainerError" else None

    for name, (_, _, allowance) in ASKS.items():
        waiting = wait_for(f"{name} refused", lambda n=name: refused(n), timeout=60)
        assert waiting["message"].startswith("UnsupportedSecurityContext: ")
        wanted = "hostUsers" if name == "pids" else allowance
        assert f"does not list {wanted})" in waiting["message"], waiting["message"]
    for name in ASKS:
        assert kube.phase(name) == "Pending"
    assert not [n for n in agent.logs().splitlines() if "container started" in n]
    for name in ASKS:
        kube.kubectl("-n", kube.namespace, "delete", "pod", name, "--wait=true")


def test_host_access_where_the_node_allows_it(
    kube: Kube,
    start_process_agent: StartProcessAgent,
    registry: Registry,
    reachable_pods_dir: Path,
) -> None:
    config = oci_config(registry, reachable_pods_dir)
    config["allow"] = ["hostUsers", "hostNetwork", "hostPID", "hostIPC", "privileged"]
    agent = start_process_agent(config)
    image = f"{registry.host}/library/busybox:latest"
    show = "id -u; cat /proc/self/uid_map; hostname; grep CapEff /proc/self/status; sleep 3600"
    uids = {}
    for name in ASKS:
        uids[name] = kube.create(asking(name, agent.node_name, image, show))["metadata"]["uid"]
    plain = busybox_pod("plain", agent.node_name, image, command=["sh", "-c", show])
    uids["plain"] = kube.create(plain)["metadata"]["uid"]
    for name in uids:
        wait_for(f"{name} Running", lambda n=name: kube.phase(n) == "Running", timeout=90)
        wait_for(f"{name}'s output", lambda n=name: "CapEff" in logs(kube, n), timeout=30)
    pids = {name: container_pid(agent, f"vkpy-{uid}-app-0") for name, uid in uids.items()}
    me = os.getpid()

    # hostUsers: true: root in the pod is the host's root, the ids unmapped.
    assert host_uid(pids["users"]) == 0
    assert logs(kube, "users").splitlines()[1].split() == ["0", "0", "4294967295"]
    assert namespace_of(pids["users"], "user") == namespace_of(me, "user")
    assert namespace_of(pids["users"], "uts") != namespace_of(me, "uts")
    # Not asked for: a user namespace and hostname of the pod's own (the network is
    # the node's here: this node runs with `network: host`).
    assert host_uid(pids["plain"]) >= 1_000_000
    assert namespace_of(pids["plain"], "user") != namespace_of(me, "user")
    assert namespace_of(pids["plain"], "uts") != namespace_of(me, "uts")
    assert logs(kube, "plain").splitlines()[2] == "plain"
    # hostNetwork: the node's network and hostname, still in the pod's user namespace.
    assert namespace_of(pids["net"], "net") == namespace_of(me, "net")
    assert namespace_of(pids["net"], "uts") == namespace_of(me, "uts")
    assert logs(kube, "net").splitlines()[2] == socket.gethostname()
    assert host_uid(pids["net"]) >= 1_000_000
    # hostPID, hostIPC: the host's namespace (and so the host's users).
    assert namespace_of(pids["pids"], "pid") == namespace_of(me, "pid")
    assert namespace_of(pids["pids"], "user") == namespace_of(me, "user")
    shown = kube.kubectl("-n", kube.namespace, "exec", "pids", "--", "cat", f"/proc/{me}/cmdline")
    assert "pytest" in shown
    assert namespace_of(pids["ipc"], "ipc") == namespace_of(me, "ipc")
    assert namespace_of(pids["plain"], "ipc") != namespace_of(me, "ipc")
    # privileged: every capability (in the pod's user namespace).
    caps = {name: logs(kube, name).splitlines()[3].split()[1] for name in ("priv", "plain")}
    assert int(caps["priv"], 16) > int(caps["plain"], 16)
    assert int(caps["priv"], 16) & (1 << 21)  # CAP_SYS_ADMIN
    for name in uids:
        kube.kubectl("-n", kube.namespace, "delete", "pod", name, "--wait=true")
