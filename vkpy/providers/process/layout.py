"""Where a pod's files live under the backend's directory, and how they are written.

One directory per pod (by UID) holds everything the backend needs to resume after a
restart of vkpy: the pod as it was given (`pod.json`), the small mutable runtime
state (`state.json`), the materialized volumes, and per container its root (the
container's view: working directory and mount points) and one directory per run
("instance", numbered like restartCount) with the supervisor's records and the logs.
Only the current and the previous instance are kept (`--previous`).

    <pods_dir>/<uid>/
      pod.json  state.json                       0600, root only (env may hold secrets)
      volumes/<volume>/                          emptyDir, or ..data + links (see volume_files)
      containers/<name>/root/                    working directory; mount paths as links
      containers/<name>/instances/<n>/           spec.json run.json exit.json output.log ...

Standard library only: the supervisor imports it.
"""

from __future__ import annotations

import json
import os
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any

KEEP_INSTANCES = 2


def write_json(path: Path, data: Any, mode: int = 0o600) -> None:
    """Write JSON atomically (temporary file, fsync-free rename)."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, mode)
    with os.fdopen(fd, "w") as handle:
        json.dump(data, handle, separators=(",", ":"))
    os.replace(tmp, path)


def read_json(path: Path) -> Any:
    """The decoded file, or None when it is missing or unreadable."""
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None


@dataclass(frozen=True)
class InstanceDir:
    """One run of a container: what to run, what happened, what it printed."""

    path: Path
    number: int

    @property
    def spec(self) -> Path:
        return self.path / "spec.json"

    @property
    def run(self) -> Path:
        return self.path / "run.json"

    @property
    def exit(self) -> Path:
        return self.path / "exit.json"

    @property
    def log(self) -> Path:
        return self.path / "output.log"

    @property
    def supervisor_log(self) -> Path:
        return self.path / "supervisor.log"


@dataclass(frozen=True)
class ContainerDir:
    path: Path

    @property
    def root(self) -> Path:
        """The container's view: its working directory, with mount paths as links."""
        return self.path / "root"

    @property
    def instances(self) -> Path:
        return self.path / "instances"

    def instance(self, number: int) -> InstanceDir:
        return InstanceDir(self.instances / str(number), number)

    def instance_numbers(self) -> list[int]:
        """The instances on disk, oldest first."""
        try:
            names = os.listdir(self.instances)
        except OSError:
            return []
        return sorted(int(n) for n in names if n.isdigit())

    def prune(self, keep: int = KEEP_INSTANCES) -> None:
        """Remove all but the newest `keep` instances."""
        for number in self.instance_numbers()[:-keep]:
            remove_tree(self.instance(number).path)


@dataclass(frozen=True)
class PodDir:
    path: Path

    @property
    def config(self) -> Path:
        return self.path / "pod.json"

    @property
    def state(self) -> Path:
        return self.path / "state.json"

    @property
    def volumes(self) -> Path:
        return self.path / "volumes"

    def volume(self, name: str) -> Path:
        return self.volumes / name

    @property
    def containers(self) -> Path:
        return self.path / "containers"

    def container(self, name: str) -> ContainerDir:
        return ContainerDir(self.containers / name)


def remove_tree(path: Path) -> None:
    """rm -rf that never follows links (a container may have put any link there)."""
    if path.is_symlink() or path.is_file():
        path.unlink(missing_ok=True)
    elif path.exists():
        shutil.rmtree(path, ignore_errors=True)
