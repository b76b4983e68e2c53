"""A pod's planted links do not make vkpy (root) touch the host (issue 26), end to end.

Both reproductions of the issue with a real restarting pod on the process backend, vkpy
as root (its production mode, the node's defaults: nothing in `allow`): the pod's first
run replaces a directory of its root with a link to a root-only host directory and
fails; before the restart vkpy makes the termination message file and its link again.
The host directory's file must survive untouched, no directory may appear in it, and the
container's status must say why it cannot run. Deleting the pods leaves nothing there.
And an id whose pod left files in a hostPath is not given to the next pod.
"""

# ruff: noqa: F811 - pytest fixtures are imported by name and then requested as arguments
from __future__ import annotations

import os
import random
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.integration.agent import Kube, wait_for
from tests.integration.process_fixtures import (  # noqa: F401 - fixtures
    StartProcessAgent,
    process_pod,
    shared_dir,
    start_process_agent,
)


@pytest.fixture
def host_dir() -> Iterator[Path]:
    """A root-only host directory (0700) holding a root-only file (0600), outside the
    pods directory: what a pod must never reach, like /etc."""
    path = Path(tempfile.mkdtemp(prefix="vkpy-host-etc-", dir="/var/tmp"))
    path.chmod(0o700)
    secret = path / "termination-log"
    secret.write_text("root's own\n")
    secret.chmod(0o600)
    yield path
    shutil.rmtree(path, ignore_errors=True)


def snapshot(path: Path) -> dict[str, tuple[int, int, int, int]]:
    """Every entry below `path` (and `path`): mode, owner, group, inode."""
    found = {".": _info(path)}
    for base, dirs, files in os.walk(path):
        for name in dirs + files:
            entry = Path(base, name)
            found[str(entry.relative_to(path))] = _info(entry)
    return found


def _info(path: Path) -> tuple[int, int, int, int]:
    info = path.lstat()
    return (info.st_mode, info.st_uid, info.st_gid, info.st_ino)


def cannot_run(kube: Kube, name: str) -> dict[str, Any] | None:
    """The container's terminated state (now or last) once it is ContainerCannotRun."""
    pod = kube.get("pod", name) or {}
    for status in pod.get("status", {}).get("containerStatuses") or []:
        for key in ("state", "lastState"):
            terminated = status.get(key, {}).get("terminated")
            if terminated and terminated.get("reason") == "ContainerCannotRun":
                return dict(terminated)
    return None


def restarts(kube: Kube, name: str) -> int:
    pod = kube.get("pod", name) or {}
    statuses = pod.get("status", {}).get("containerStatuses") or [{}]
    return int(statuses[0].get("restartCount", 0))


def planting_pod(name: str, node: str, link: str, target: Path, **container: Any) -> dict[str, Any]:
    """A pod whose first run replaces `link` in its root with a link to `target` and
    fails; later runs would just wait."""
    script = (
        "if [ -e planted ]; then echo SECOND-RUN; sleep 3600; fi; touch planted; "
        f"rm -rf {link} && ln -s {target} {link} && echo PLANTED; exit 1"
    )
    return process_pod(name, node, script, "Always", container=container)


def test_a_pods_links_do_not_make_vkpy_delete_host_files_or_make_directories(
    kube: Kube, start_process_agent: StartProcessAgent, host_dir: Path
) -> None:
    first = random.randrange(400_000, 900_000, 1000)
    agent = start_process_agent({"pod_uid_range": f"{first}-{first + 999}"})
    before = snapshot(host_dir)
    # tmsg: the default path, /dev/termination-log, with `dev -> <host dir>`.
    kube.create(planting_pod("tmsg", agent.node_name, "dev", host_dir))
    # tmsg2: /m/sub/dir/termination-log with `m -> <host dir>`.
    kube.create(
        planting_pod(
            "tmsg2",
            agent.node_name,
            "m",
            host_dir,
            terminationMessagePath="/m/sub/dir/termination-log",
        )
    )
    # The restart's preparation is over once restartCount counts it: only then look.
    for name in ("tmsg", "tmsg2"):
        wait_for(f"{name} restarted", lambda n=name: restarts(kube, n) >= 1, timeout=120)
    assert (host_dir / "termination-log").read_text() == "root's own\n"
    assert not (host_dir / "sub").exists()
    assert snapshot(host_dir) == before
    refused = wait_for("tmsg's restart refused", lambda: cannot_run(kube, "tmsg"), timeout=60)
    assert (
        "terminationMessagePath: 'dev' in 'dev/termination-log' is a symbolic link"
        in (refused["message"])
    ), refused
    refused2 = wait_for("tmsg2's restart refused", lambda: cannot_run(kube, "tmsg2"), timeout=60)
    assert "'m' in 'm/sub/dir/termination-log' is a symbolic link" in refused2["message"]
    assert snapshot(host_dir) == before
    for name in ("tmsg", "tmsg2"):
        kube.kubectl("delete", "pod", name, "-n", kube.namespace, "--wait=true", "--timeout=90s")
    assert snapshot(host_dir) == before


def test_an_id_that_still_owns_files_in_a_hostpath_is_not_given_to_the_next_pod(
    kube: Kube, start_process_agent: StartProcessAgent, shared_dir: Path
) -> None:
    """A pod writes into a hostPath as its own id and is deleted: what it wrote stays
    (hostPath outlives pods), so the next pod must not get that id, which would make
    it the owner of those files."""
    first = random.randrange(400_000, 900_000, 1000)
    agent = start_process_agent(
        {"pod_uid_range": f"{first}-{first + 1}", "host_path_prefixes": [str(shared_dir)]}
    )
    volume = {"volumes": [{"name": "data", "hostPath": {"path": str(shared_dir)}}]}
    mounts = {"volumeMounts": [{"name": "data", "mountPath": "/data"}]}

    def writes_its_id(name: str) -> int:
        script = f"echo mine > /data/{name}-file; id -u > /data/{name}-id; sleep 3600"
        kube.create(process_pod(name, agent.node_name, script, container=mounts, **volume))
        written = shared_dir / f"{name}-id"
        wait_for(f"{name}'s id", lambda: written.exists() and written.read_text().strip())
        return int(written.read_text())

    writer = writes_its_id("writer")
    assert (shared_dir / "writer-file").stat().st_uid == writer
    kube.kubectl("delete", "pod", "writer", "-n", kube.namespace, "--wait=true", "--timeout=90s")
    assert (shared_dir / "writer-file").read_text() == "mine\n"
    following = writes_its_id("following")
    assert following != writer
    assert (shared_dir / "writer-file").stat().st_uid == writer
