"""What a removed pod's own id still owns outside the pod's directory.

A pod's files are in its directory, removed with it; but the pod may have written
elsewhere as its own id: in a hostPath volume (the admin allowed it), and, without a
filesystem of its own (`pod_filesystem: false`), in the host's shared scratch
directories (/tmp, /var/tmp, /dev/shm). A later pod given the same id would own
what it left there. So when a pod is removed, its files in the host's scratch
directories are removed (as systemd does for a dynamic user's IPC objects), and
what it left in its hostPath volumes, which outlive pods by design, keeps its id
from being given to another pod (idclaims.py) until nothing there is owned by it.
Walks never follow a link, and removal goes through descriptors (beneath.py's rules).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import stat
from collections.abc import Iterable
from pathlib import Path

from vkpy.providers.process.layout import PodDir, read_json
from vkpy.providers.process.persist import pod_from_dict

SCRATCH = ("/tmp", "/var/tmp", "/dev/shm")  # noqa: S108 (the host's, not ours)
"""Where any user may write on a host: a pod without a filesystem of its own too."""


def host_paths(pod_dir: PodDir) -> list[str]:
    """The pod's hostPath directories (as the admin allowed them: followed)."""
    raw = read_json(pod_dir.config)
    if not isinstance(raw, dict):
        return []
    found = []
    for volume in pod_from_dict(raw).volumes:
        if volume.kind == "hostPath":
            path = os.path.realpath(str(volume.source.get("path", "")))
            if os.path.isdir(path):
                found.append(path)
    return sorted(set(found))


def first_owned(tops: Iterable[str], ids: frozenset[int], skip: str = "") -> str | None:
    """The first entry below `tops` (or a top itself) owned by one of `ids`, or None;
    links are not followed, `skip` (the pods directory) is not entered."""
    for top in tops:
        try:
            if os.lstat(top).st_uid in ids:
                return top
        except OSError:
            continue
        for base, dirs, files in os.walk(top, followlinks=False):
            dirs[:] = [d for d in dirs if os.path.join(base, d) != skip]
            for name in dirs + files:
                path = os.path.join(base, name)
                with contextlib.suppress(OSError):
                    if os.lstat(path).st_uid in ids:
                        return path
    return None


def remove_owned(top: str, ids: frozenset[int], skip: str = "") -> int:
    """Remove every entry below `top` owned by one of `ids` (a directory with all it
    holds), through descriptors and never through a link; returns how many."""
    try:
        fd = os.open(top, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError:
        return 0
    skipped = os.stat(skip) if skip and os.path.isdir(skip) else None
    try:
        return _remove_in(fd, ids, skipped)
    finally:
        os.close(fd)


def _remove_in(fd: int, ids: frozenset[int], skipped: os.stat_result | None) -> int:
    removed = 0
    for name in os.listdir(fd):
        try:
            info = os.lstat(name, dir_fd=fd)
        except OSError:
            continue
        directory = stat.S_ISDIR(info.st_mode)
        if skipped is not None and (info.st_dev, info.st_ino) == (skipped.st_dev, skipped.st_ino):
            continue
        if info.st_uid in ids:
            with contextlib.suppress(OSError):
                if directory:
                    shutil.rmtree(name, dir_fd=fd)  # its fd-based walk: links not followed
                else:
                    os.unlink(name, dir_fd=fd)
                removed += 1
        elif directory:
            try:
                child = os.open(
                    name, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=fd
                )
            except OSError:
                continue
            try:
                removed += _remove_in(child, ids, skipped)
            finally:
                os.close(child)
    return removed


def clean_scratch(ids: frozenset[int], pods: Path) -> int:
    """Remove what `ids` own in the host's scratch directories (the pods directory,
    possibly among them, is left alone); returns how many entries went."""
    skip = str(pods.absolute())
    return sum(remove_owned(top, ids, skip) for top in SCRATCH)
