"""Ending what a process-backend node left running once the node is gone for good.

vkpy leaves its pods running when it stops, so that a restart adopts them. A node
taken down for good (the dev cluster's `down`, the end of a test) must end them
itself: each container's supervisor and process group, each pod's namespace holder,
and the memory emptyDirs mounted on the host. Only processes whose pid and start
time still match their records are signalled, so a recycled pid is never hit.
"""

from __future__ import annotations

import contextlib
import os
import signal
from pathlib import Path

from vkpy.providers.process import namespaces, sandbox
from vkpy.providers.process.layout import read_json
from vkpy.providers.process.proc import is_same_process
from vkpy.providers.process.records import RunRecord


def end_pods(pods: Path) -> int:
    """End everything of every pod under `pods`; returns how many containers were
    still running."""
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
    for pod in pods.glob("*/"):
        namespaces.stop(pod)
        sandbox.unmount_volumes(pod)
    return killed
