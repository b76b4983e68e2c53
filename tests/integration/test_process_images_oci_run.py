"""How `runtime: oci` runs a container, as seen on the host: the supervisor is the
container's parent (runc create + start, the supervisor a child subreaper), with no
runc process kept per container and the container's own exit status; and each
container's root is an overlay on the image unpacked once per node."""

# ruff: noqa: F811 - pytest fixtures are imported by name and then requested as arguments
from __future__ import annotations

import json
from pathlib import Path

from tests.integration.agent import Kube, wait_for
from tests.integration.oci_fixtures import (  # noqa: F401 - registry: a fixture
    ROOT_ONLY,
    busybox_pod,
    container_pid,
    host_uid,
    kubectl,
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
from vkpy.oci.runtime import overlay
from vkpy.providers.process import proc

pytestmark = ROOT_ONLY


def descendants(pid: int) -> list[int]:
    tree: dict[int, list[int]] = {}
    for process in proc.every():
        tree.setdefault(process.ppid, []).append(process.pid)
    found, todo = [], [pid]
    while todo:
        children = tree.get(todo.pop(), [])
        found += children
        todo += children
    return found


def command_name(pid: int) -> str:
    return Path(f"/proc/{pid}/comm").read_text().strip()


def test_the_supervisor_is_the_containers_parent_and_keeps_its_exit_code(
    kube: Kube,
    start_process_agent: StartProcessAgent,
    registry: Registry,
    reachable_pods_dir: Path,
) -> None:
    agent = start_process_agent(oci_config(registry, reachable_pods_dir))
    image = f"{registry.host}/library/busybox:latest"
    created = kube.create(busybox_pod("kept", agent.node_name, image, command=["sleep", "3600"]))
    uid = created["metadata"]["uid"]
    wait_for("kept Running", lambda: kube.phase("kept") == "Running", timeout=60)
    run = json.loads((reachable_pods_dir / uid / "containers/app/instances/0/run.json").read_text())
    pid = container_pid(agent, f"vkpy-{uid}-app-0")
    assert run["pid"] == pid  # the container's init, not a runtime process
    below = descendants(run["supervisor_pid"])
    assert below == [pid]
    assert command_name(pid) == "sleep"
    assert not [p for p in below if command_name(p).startswith("runc")]

    ended = kube.create(
        busybox_pod("ends", agent.node_name, image, command=["sh", "-c", "echo bye; exit 3"])
    )
    wait_for("ends Failed", lambda: kube.phase("ends") == "Failed", timeout=60)
    terminated = status_of(kube.get("pod", "ends"))["state"]["terminated"]
    assert terminated["exitCode"] == 3
    assert terminated["reason"] == "Error"
    assert kubectl(kube, "logs", "ends").strip() == "bye"

    roots = [reachable_pods_dir / u / "containers/app/rootfs" for u in (uid, ended_uid(ended))]
    assert overlay.is_mount(roots[0])
    # One unpacked tree per image for the node's pods (busybox, and pause for the
    # sandboxes), not a copy per container.
    trees = list((agent.state_dir / "process" / "oci" / "images").iterdir())
    assert len(trees) == 2 and all(tree.name.startswith("sha256-") for tree in trees)
    [tree] = [tree for tree in trees if (tree / "bin" / "busybox").exists()]
    assert (roots[0] / "bin" / "busybox").stat().st_uid == (roots[0] / "bin").stat().st_uid
    assert (roots[0] / "bin" / "busybox").stat().st_uid != 0  # mapped to the pod
    assert (tree / "bin" / "busybox").stat().st_uid == 0  # the shared tree: untouched

    # The sandbox is the pause image (pulled through the registry.k8s.io mirror), run
    # as its user 65535 in the pod's range; the container's root is 0 in that range.
    sandbox = container_pid(agent, f"vkpy-{uid}")
    assert command_name(sandbox) == "pause"
    assert host_uid(sandbox) == host_uid(pid) + 65535
    assert "GET /v2/pause/manifests/3.10" in registry.requests()

    kubectl(kube, "delete", "pod", "kept", "ends", "--wait=true", "--timeout=60s")
    for root in roots:
        assert not overlay.is_mount(root)
    assert tree.is_dir()  # kept for the next pod of the image


def ended_uid(pod: dict[str, object]) -> str:
    metadata = pod["metadata"]
    assert isinstance(metadata, dict)
    return str(metadata["uid"])


def test_a_pod_whose_sandbox_image_cannot_be_pulled_stays_pending(
    kube: Kube,
    start_process_agent: StartProcessAgent,
    registry: Registry,
    reachable_pods_dir: Path,
) -> None:
    missing = f"{registry.host}/pause:not-there"
    agent = start_process_agent(
        {**oci_config(registry, reachable_pods_dir), "pod_infra_container_image": missing}
    )
    image = f"{registry.host}/library/busybox:latest"
    kube.create(busybox_pod("nobox", agent.node_name, image, command=["sleep", "3600"]))

    def waiting() -> dict[str, object]:
        state = status_of(kube.get("pod", "nobox")).get("state") or {}
        return dict(state.get("waiting") or {})

    wait_for("a sandbox failure", lambda: "sandbox" in str(waiting().get("message")), timeout=60)
    assert waiting()["reason"] == "ContainerCreating"
    assert missing in str(waiting()["message"])
    wait_for("a retry", lambda: sum(failed_events(kube)) >= 2, timeout=60)
    assert kube.phase("nobox") == "Pending"  # never Failed
    # Nothing of it kept while it waits: between two tries (one may be under way at
    # any moment, making and then removing the pod's directory).
    wait_for(
        "no pod directory between tries",
        lambda: not list(reachable_pods_dir.iterdir()),
        timeout=30,
        interval=0.05,
    )
    kubectl(kube, "delete", "pod", "nobox", "--wait=true", "--timeout=60s")


def failed_events(kube: Kube) -> list[int]:
    """How many times each Event of the sandbox failure was reported (repeats fold)."""
    return [
        int(e.get("count") or 1)
        for e in kube.events("nobox")
        if "Failed to create pod sandbox" in str(e.get("message"))
    ]
