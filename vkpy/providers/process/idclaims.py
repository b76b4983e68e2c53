"""Host-wide claims on pod ids, so two nodes on one host never give one id to two pods.

Each node allocates pod ids from `pod_uid_range` (identity.py), and every node on a
host has the same default range. A node's own bookkeeping cannot see another
node's pods, and a pod's processes start a while after its id is chosen (its
namespaces and filesystem are made first): two nodes starting pods at once chose
the same id, so their pods could read each other's files, and removing one pod
killed the other's processes (every process of the pod's id is killed). A claim is
a file `<directory>/<id>` made with O_EXCL, holding the pod directory that owns the
id; it is dropped when the pod is removed. A claim whose pod directory no longer
records that id (a vkpy that died, a state directory removed by hand) is stale
after `grace` seconds and taken over.
"""

from __future__ import annotations

import contextlib
import os
import time
from pathlib import Path

from vkpy.providers.process.layout import read_json

DEFAULT_DIRECTORY = Path("/run/vkpy/pod-ids")


class HostClaims:
    def __init__(self, directory: Path = DEFAULT_DIRECTORY, grace: float = 120.0) -> None:
        self.directory = directory
        self.grace = grace

    def claim(self, own: int, pod_dir: Path, take_over: bool = False) -> bool:
        """Claim `own` for the pod in `pod_dir`; False when another pod holds it.
        `take_over`: the pod already has the id (a restarted vkpy)."""
        self.directory.mkdir(mode=0o700, parents=True, exist_ok=True)
        path = self.directory / str(own)
        for _ in range(2):
            try:
                fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            except FileExistsError:
                owner = self._owner(path)
                if owner == str(pod_dir):
                    return True
                if not (take_over or self._stale(path, owner, own)):
                    return False
                with contextlib.suppress(FileNotFoundError):
                    path.unlink()
                continue
            with os.fdopen(fd, "w") as handle:
                handle.write(str(pod_dir))
            return True
        return False

    def release(self, own: int, pod_dir: Path) -> None:
        path = self.directory / str(own)
        if self._owner(path) == str(pod_dir):
            with contextlib.suppress(FileNotFoundError):
                path.unlink()

    def held_by_other(self, own: int, pod_dir: Path | None) -> bool:
        """Whether a pod other than the one in `pod_dir` claims `own`."""
        owner = self._owner(self.directory / str(own))
        return owner is not None and owner != str(pod_dir)

    @staticmethod
    def _owner(path: Path) -> str | None:
        try:
            return path.read_text()
        except OSError:
            return None

    def _stale(self, path: Path, owner: str | None, own: int) -> bool:
        """Whether the claim at `path`, by the pod directory `owner`, may be taken over."""
        if owner is None:
            return True  # gone (or unreadable) meanwhile
        try:
            age = time.time() - path.stat().st_mtime
        except OSError:
            return True
        if age < self.grace:
            return False  # just claimed: its pod directory may not be written yet
        raw = read_json(Path(owner) / "identity.json")
        return not (isinstance(raw, dict) and raw.get("own") == own)
