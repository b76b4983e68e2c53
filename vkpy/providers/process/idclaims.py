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

A removed pod whose id still owns files outside its directory (in a hostPath, see
owned.py) leaves its claim behind as a leftover claim (`{"leftovers": [dirs]}`):
the id is given to no pod, on any node of the host, until nothing below those
directories is owned by it (checked again at most every `grace` seconds).
"""

from __future__ import annotations

import contextlib
import json
import os
import time
from collections.abc import Sequence
from pathlib import Path

from vkpy.providers.process.layout import read_json
from vkpy.providers.process.owned import first_owned

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
                leftovers = _leftovers(owner)
                if leftovers is not None:
                    if self._still_owned(path, own, leftovers):
                        return False
                elif not (take_over or self._stale(path, owner, own)):
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

    def keep(self, own: int, pod_dir: Path, places: Sequence[str]) -> bool:
        """At the removal of the pod in `pod_dir`: if its id owns something below
        `places`, its claim stays as a leftover claim (True); else it is released."""
        path = self.directory / str(own)
        if self._owner(path) != str(pod_dir):
            return False
        if first_owned(places, frozenset({own})) is None:
            self.release(own, pod_dir)
            return False
        partial = path.with_name(f".{own}.tmp")
        partial.write_text(json.dumps({"leftovers": list(places)}))
        partial.replace(path)
        return True

    def _still_owned(self, path: Path, own: int, places: list[str]) -> bool:
        """Whether the leftover claim at `path` still holds (looked at again at most
        every `grace` seconds)."""
        try:
            age = time.time() - path.stat().st_mtime
        except OSError:
            return False
        if age < self.grace:
            return True
        if first_owned(places, frozenset({own})) is None:
            return False
        with contextlib.suppress(OSError):
            os.utime(path)
        return True

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


def _leftovers(owner: str | None) -> list[str] | None:
    """The directories of a leftover claim, or None for a pod's claim."""
    if not owner or not owner.startswith("{"):
        return None
    try:
        raw = json.loads(owner)
    except ValueError:
        return None
    places = raw.get("leftovers") if isinstance(raw, dict) else None
    return [str(p) for p in places] if isinstance(places, list) else None
