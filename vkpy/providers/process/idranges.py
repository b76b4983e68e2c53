"""Each `runtime: oci` pod's host id range, claimed host-wide and never reused early.

A pod in `oci` mode runs in a user namespace of its own: its ids 0-65535 are a
range of host ids that no other pod has, so root in the pod is an unprivileged id on
the host and two pods can never touch each other's files. Ranges are slots of 65536
ids from `oci_id_base`; a slot is claimed as idclaims.py claims a single id: a file
`<directory>/<slot>` made with O_EXCL holding the pod directory, shared by every node
on the host. The pod directory records its slot (`idrange.json`), so a restarted
vkpy finds it again; the claim is dropped only once nothing of the pod remains (its
containers, sandbox and root filesystems are gone), so files a removed pod's ids own
can never be handed to a new pod while they exist. A claim whose pod directory no
longer records that slot (a state directory removed by hand) is stale and taken.
"""

from __future__ import annotations

import contextlib
import os
from dataclasses import dataclass
from pathlib import Path

from vkpy.providers.process.layout import read_json, write_json

DEFAULT_DIRECTORY = Path("/run/vkpy/pod-id-ranges")
RANGE_SIZE = 65536
RECORD = "idrange.json"


class NoRangeError(RuntimeError):
    """Every slot is claimed by a pod (on this node or another of the host)."""


@dataclass(frozen=True)
class PodRange:
    slot: int
    base: int
    size: int = RANGE_SIZE

    def host_id(self, pod_id: int) -> int:
        """The host id of the pod's id `pod_id`."""
        if not 0 <= pod_id < self.size:
            raise ValueError(f"id {pod_id} is outside the pod's user namespace (0-{self.size - 1})")
        return self.base + pod_id


def load(pod_dir: Path) -> PodRange | None:
    raw = read_json(pod_dir / RECORD)
    if not isinstance(raw, dict):
        return None
    try:
        return PodRange(int(raw["slot"]), int(raw["base"]), int(raw.get("size", RANGE_SIZE)))
    except (KeyError, TypeError, ValueError):
        return None


class IdRanges:
    def __init__(self, base: int, count: int, directory: Path = DEFAULT_DIRECTORY) -> None:
        self.base = base
        self.count = count
        self.directory = directory

    def claim(self, pod_dir: Path) -> PodRange:
        """The pod's range: the one its directory records, else a free slot (recorded)."""
        known = load(pod_dir)
        if known is not None and self._take(known.slot, pod_dir, take_over=True):
            return known
        for slot in range(self.count):
            if self._take(slot, pod_dir):
                claimed = PodRange(slot, self.base + slot * RANGE_SIZE)
                write_json(pod_dir / RECORD, {"slot": claimed.slot, "base": claimed.base})
                return claimed
        raise NoRangeError(
            f"all {self.count} pod id ranges of this host are in use (oci_id_ranges)"
        )

    def release(self, slot: int, pod_dir: Path) -> None:
        """Drop the claim (call only once nothing of the pod remains)."""
        path = self.directory / str(slot)
        if _owner(path) == str(pod_dir):
            with contextlib.suppress(FileNotFoundError):
                path.unlink()

    def _take(self, slot: int, pod_dir: Path, take_over: bool = False) -> bool:
        self.directory.mkdir(mode=0o700, parents=True, exist_ok=True)
        path = self.directory / str(slot)
        for _ in range(2):
            try:
                fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            except FileExistsError:
                owner = _owner(path)
                if owner == str(pod_dir):
                    return True
                if not take_over and not _stale(owner, slot):
                    return False
                with contextlib.suppress(FileNotFoundError):
                    path.unlink()
                continue
            with os.fdopen(fd, "w") as handle:
                handle.write(str(pod_dir))
            return True
        return False


def _owner(path: Path) -> str | None:
    try:
        return path.read_text()
    except OSError:
        return None


def _stale(owner: str | None, slot: int) -> bool:
    """A claim whose pod directory is gone or records another slot. A directory just
    made (its record not yet written) holds: the claim file is written first."""
    if owner is None:
        return True
    directory = Path(owner)
    if not directory.exists():
        return True
    if not (directory / RECORD).exists():
        return False
    known = load(directory)
    return known is None or known.slot != slot
