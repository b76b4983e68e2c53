"""Termination messages: what a container leaves in `terminationMessagePath`, or the
end of its log, as the message of its terminated state (the kubelet's rules).

Before each run, the container gets an empty message file (`termination-log` in its
directory, owned by the pod's user, mode 0666 like the kubelet's, so a non-root
container can write it), shown in its root at `terminationMessagePath`
(`/dev/termination-log` by default) as a link, the way mount paths are. When the run
has ended, the message is the file's last 4 KiB; with `terminationMessagePolicy:
FallbackToLogsOnError`, an empty file, a non-zero exit and a container that did run,
it is the last 80 lines of the log, at most its last 2 KiB. The message follows the
runtime's own message (e.g. why a container could not run) after ": ".

The message is computed once, when vkpy sees the run end, and kept in the instance
directory (the file is reused by the next run), so a restarted vkpy and `lastState`
still report it. The file is read without following links: the container may replace
the link in its root, never the file.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
from collections import deque
from collections.abc import Sequence
from pathlib import Path

from vkpy.core.objects import KubeObject
from vkpy.providers.process.beneath import place_link
from vkpy.providers.process.config import RunAs
from vkpy.providers.process.filesystem import MountBase, locate
from vkpy.providers.process.layout import ContainerDir, InstanceDir
from vkpy.providers.process.logfile import log_files, parse_record
from vkpy.providers.process.records import ExitRecord
from vkpy.providers.process.validation import clean_absolute

DEFAULT_PATH = "/dev/termination-log"
MESSAGE_FILE = "termination-log"
KEPT_MESSAGE = "termination-message"
"""The computed message of a run, in its instance directory."""
MAX_FILE_BYTES = 4 * 1024
MAX_LOG_BYTES = 2 * 1024
MAX_LOG_LINES = 80
LOG_WINDOW = 64 * 1024
FILE_MODE = 0o666
DIR_MODE = 0o755


def message_path(spec: KubeObject) -> str:
    """The container's terminationMessagePath relative to its root ("" for none)."""
    path = str(spec.get("terminationMessagePath") or DEFAULT_PATH)
    return clean_absolute(path, "terminationMessagePath")


def prepare_message_file(
    cdir: ContainerDir,
    spec: KubeObject,
    run_as: RunAs,
    mounts: Sequence[MountBase] = (),
    shown: bool = True,
) -> None:
    """An empty message file for the next run, shown at the container's path (inside
    the volume of `mounts` the path lies in, if any) unless not `shown` (`runtime:
    oci` binds the file there itself). Raises LinkRefused when the path goes through a
    link the pod planted."""
    target = cdir.path / MESSAGE_FILE
    with contextlib.suppress(FileNotFoundError):
        target.unlink()
    fd = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, FILE_MODE)
    try:
        os.fchmod(fd, FILE_MODE)
        if run_as.uid is not None:
            os.fchown(fd, run_as.uid, run_as.gid if run_as.gid is not None else -1)
    finally:
        os.close(fd)
    relative = message_path(spec)
    if not shown or not relative or cdir.root.is_symlink():
        return  # no path, or the root is another container's (an ephemeral's target)
    parts = tuple(relative.split("/"))
    if any(mount.parts == parts for mount in mounts):
        return  # a volume is mounted there: the file stays unreachable, as it would
    # The container's root and its volumes are the pod's: walked from the root, or
    # from the volume the path lies in, without following any link (beneath.py).
    _, base, below = locate(Path(os.path.realpath(cdir.root)), mounts, parts)
    real_target = os.path.join(os.path.realpath(cdir.path), MESSAGE_FILE)
    place_link(
        base,
        below,
        os.path.relpath(real_target, base.joinpath(*below.split("/")[:-1])),
        "terminationMessagePath",
        DIR_MODE,
        run_as,
    )  # False: a directory is there: the file stays unreachable, as it would


def _read_tail(path: Path, limit: int) -> bytes:
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except FileNotFoundError:
        return b""
    with os.fdopen(fd, "rb") as file:
        size = os.fstat(fd).st_size
        file.seek(max(0, size - limit))
        return file.read(limit)


def _log_tail(instance: InstanceDir) -> bytes:
    """The last lines the run printed (both streams), from the end of its log files:
    the message keeps at most 2 KiB of at most 80 lines, so the last LOG_WINDOW bytes
    of records are enough."""
    chunks: list[bytes] = []
    size = 0
    for path in reversed(log_files(instance.log)):
        chunk = _read_tail(path, LOG_WINDOW - size)
        chunks.insert(0, chunk)
        size += len(chunk)
        if size >= LOG_WINDOW:
            break
    raw = b"".join(chunks).split(b"\n")
    if size >= LOG_WINDOW:
        raw = raw[1:]  # the first line may be cut
    kept: deque[bytes] = deque(maxlen=MAX_LOG_LINES)
    line = b""
    for record in filter(None, map(parse_record, raw)):
        line += record.data
        if not record.partial:
            kept.append(line)
            line = b""
    if line:
        kept.append(line)
    return b"".join(kept)[-MAX_LOG_BYTES:]


def compute_message(
    cdir: ContainerDir, instance: InstanceDir, spec: KubeObject, record: ExitRecord
) -> str:
    """The termination message of the run that ended with `record`."""
    fallback = (
        spec.get("terminationMessagePolicy") == "FallbackToLogsOnError"
        and record.exit_code != 0
        and record.reason != "ContainerCannotRun"
    )
    data = _read_tail(cdir.path / MESSAGE_FILE, MAX_FILE_BYTES)
    if not data and fallback:
        data = _log_tail(instance)
    return data.decode("utf-8", "replace")


def with_message(
    record: ExitRecord,
    cdir: ContainerDir,
    instance: InstanceDir,
    spec: KubeObject,
    compute: bool = True,
) -> ExitRecord:
    """`record` with the run's termination message; computed and kept on first call
    (with `compute`: the message file still holds this run's message)."""
    kept = instance.path / KEPT_MESSAGE
    try:
        text = kept.read_text(errors="replace")
    except FileNotFoundError:
        if not compute:
            return record
        try:
            text = compute_message(cdir, instance, spec, record)
        except OSError as error:
            text = f"Error on reading termination log: {error}"
        with contextlib.suppress(OSError):
            partial = kept.with_suffix(".tmp")
            partial.write_text(text)
            partial.replace(kept)
    if not text:
        return record
    message = f"{record.message}: {text}" if record.message else text
    return dataclasses.replace(record, message=message)
