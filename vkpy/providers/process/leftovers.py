"""Ending what a process-backend node left running once the node is gone for good.

vkpy leaves its pods running when it stops, so that a restart adopts them. A node
taken down for good (the dev cluster's `down`, the end of a test) must end them
itself: each container's supervisor and process group, each pod's namespace holder,
the memory emptyDirs mounted on the host, and (`runtime: oci`) every runc container
and sandbox of its pods with their cgroups. Only processes whose pid and start
time still match their records are signalled, so a recycled pid is never hit.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
from pathlib import Path

from vkpy.providers.process import namespaces, ocipods, sandbox
from vkpy.providers.process.layout import read_json
from vkpy.providers.process.proc import is_same_process
from vkpy.providers.process.records import RunRecord


def end_pods(pods: Path) -> int:
    """End everything of every pod under `pods`; returns how many containers were
    still running. `pods` may be a link (a dev cluster node's): the mounts below are
    found by the real path, as the mount table names them."""
    pods = pods.resolve()
    killed = 0
    for run_file in pods.glob("*/containers/*/instances/*/run.json"):
        raw = read_json(run_file)
        try:
            run = RunRecord.from_dict(raw)
        except (KeyError, TypeError, ValueError):
            continue  # missing, unreadable or not a run record
        alive = False
        for pid, start, kill in (
            (run.supervisor_pid, run.supervisor_start, os.kill),
            (run.pid, run.pid_start, os.killpg),
        ):
            if is_same_process(pid, start):
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    kill(pid, signal.SIGKILL)
                    alive = True
        killed += alive
    _end_runc_containers(pods)
    for pod in pods.glob("*/"):
        namespaces.stop(pod)
        sandbox.unmount_volumes(pod)
    return killed


def _end_runc_containers(pods: Path) -> None:
    """`runtime: oci`: runc's containers and sandboxes of these pods (the runc
    command line, with its state directory, is in each run's spec.json)."""
    commands: set[tuple[str, ...]] = set()
    for spec_file in pods.glob("*/containers/*/instances/*/spec.json"):
        raw = read_json(spec_file)
        prefix = raw.get("exec_prefix") if isinstance(raw, dict) else None
        if isinstance(prefix, list) and len(prefix) >= 2:
            commands.add(tuple(str(part) for part in prefix[:-1]))  # without "exec"
    uids = {pod.name for pod in pods.glob("*/")}
    for runc in commands:
        try:
            listed = subprocess.run(
                [*runc, "list", "--format", "json"], capture_output=True, check=True, timeout=30
            ).stdout
            ids = [str(item["id"]) for item in json.loads(listed or b"null") or []]
        except (OSError, subprocess.SubprocessError, ValueError, KeyError, TypeError):
            continue
        for container in ids:
            if any(container.startswith(ocipods.sandbox_id(uid)) for uid in uids):
                subprocess.run(
                    [*runc, "delete", "--force", container],
                    capture_output=True,
                    check=False,
                    timeout=30,
                )
    for uid in uids:  # their mounts go with end_pods' sandbox.unmount_volumes
        ocipods.remove_cgroups(uid)
