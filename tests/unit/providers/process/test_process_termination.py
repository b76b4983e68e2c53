"""Termination messages on the process backend, by the kubelet's rules: the message
file (last 4 KiB), FallbackToLogsOnError (last 80 lines, at most 2 KiB, only for a
failed container that ran), kept for the run after the file is reused."""

import os
from pathlib import Path
from typing import Any

from vkpy.providers.base import ContainerConfig, VolumeConfig
from vkpy.providers.process.config import RunAs
from vkpy.providers.process.filesystem import (
    materialize_volume,
    mount_bases,
    prepare_pod_dir,
    prepare_root,
)
from vkpy.providers.process.layout import ContainerDir, PodDir
from vkpy.providers.process.logfile import LogWriter
from vkpy.providers.process.records import ExitRecord
from vkpy.providers.process.termination import prepare_message_file, with_message

NOBODY = RunAs(uid=65534, gid=65534) if os.geteuid() == 0 else RunAs(uid=None, gid=None)


def container(tmp_path: Path) -> ContainerDir:
    cdir = ContainerDir(tmp_path / "app")
    cdir.root.mkdir(parents=True)
    cdir.instance(0).path.mkdir(parents=True)
    return cdir


def ended(code: int, reason: str = "", message: str | None = None) -> ExitRecord:
    return ExitRecord(
        exit_code=code,
        finished_ns=1,
        reason=reason or ("Completed" if code == 0 else "Error"),
        message=message,
    )


def log(cdir: ContainerDir, *lines: bytes) -> None:
    writer = LogWriter(cdir.instance(0).log, 1 << 20, 1)
    for line in lines:
        writer.write("stdout", line)
    writer.close()


def test_the_message_file_is_at_the_containers_path_and_writable(tmp_path: Path) -> None:
    cdir = container(tmp_path)
    spec: dict[str, Any] = {"name": "app"}
    prepare_message_file(cdir, spec, NOBODY)
    link = cdir.root / "dev/termination-log"
    assert link.is_symlink()
    stat = os.stat(link)
    assert stat.st_mode & 0o777 == 0o666
    if NOBODY.uid is not None:
        assert stat.st_uid == NOBODY.uid
    link.write_text("DONE")
    record = with_message(ended(0), cdir, cdir.instance(0), spec)
    assert record.message == "DONE"


def test_a_custom_path_and_the_last_4_kib(tmp_path: Path) -> None:
    cdir = container(tmp_path)
    spec = {"name": "app", "terminationMessagePath": "/tmp/custom/msg"}
    prepare_message_file(cdir, spec, NOBODY)
    (cdir.root / "tmp/custom/msg").write_text("x" * 5000 + "END")
    record = with_message(ended(1), cdir, cdir.instance(0), spec)
    assert record.message is not None and len(record.message) == 4096
    assert record.message.endswith("END")


def test_a_path_inside_a_volume_reaches_the_file(tmp_path: Path) -> None:
    """terminationMessagePath under a mounted emptyDir (/tmp/msg with an emptyDir at
    /tmp): the link is made in the volume, and what the container writes there is
    the message."""
    pod = PodDir(tmp_path / "pod")
    volumes = {"scratch": VolumeConfig("scratch", "emptyDir")}
    prepare_pod_dir(pod)
    materialize_volume(pod, volumes["scratch"], NOBODY)
    mounts = [{"name": "scratch", "mountPath": "/tmp"}]
    spec = {"name": "app", "terminationMessagePath": "/tmp/msg", "volumeMounts": mounts}
    app = ContainerConfig("app", "busybox", ("true",), (), spec=spec)
    prepare_root(pod, app, volumes, NOBODY)
    cdir = pod.container("app")
    cdir.instance(0).path.mkdir(parents=True)
    prepare_message_file(cdir, spec, NOBODY, mount_bases(pod, app, volumes))
    assert (pod.volume("scratch") / "msg").is_symlink()
    (cdir.root / "tmp" / "msg").write_text("IN THE VOLUME")
    record = with_message(ended(1), cdir, cdir.instance(0), spec)
    assert record.message == "IN THE VOLUME"


def test_fallback_to_logs_on_error(tmp_path: Path) -> None:
    cdir = container(tmp_path)
    spec = {"name": "app", "terminationMessagePolicy": "FallbackToLogsOnError"}
    prepare_message_file(cdir, spec, NOBODY)
    log(cdir, *(f"line {n}\n".encode() for n in range(100)), b"DONE")
    record = with_message(ended(1), cdir, cdir.instance(0), spec)
    assert record.message is not None
    lines = record.message.split("\n")
    assert lines[0] == "line 21" and lines[-1] == "DONE"
    assert len(lines) == 80


def test_fallback_keeps_the_last_2_kib(tmp_path: Path) -> None:
    cdir = container(tmp_path)
    spec = {"name": "app", "terminationMessagePolicy": "FallbackToLogsOnError"}
    prepare_message_file(cdir, spec, NOBODY)
    log(cdir, b"a" * 3000 + b"\n", b"the end")
    record = with_message(ended(2), cdir, cdir.instance(0), spec)
    assert record.message is not None and len(record.message) == 2048
    assert record.message.endswith("\nthe end")


def test_no_fallback_on_success_or_when_the_container_never_ran(tmp_path: Path) -> None:
    spec = {"name": "app", "terminationMessagePolicy": "FallbackToLogsOnError"}
    cdir = container(tmp_path)
    prepare_message_file(cdir, spec, NOBODY)
    log(cdir, b"OK")
    assert with_message(ended(0), cdir, cdir.instance(0), spec).message is None
    other = container(tmp_path / "other")
    prepare_message_file(other, spec, NOBODY)
    log(other, b"noise")
    cannot = ended(128, "ContainerCannotRun", "exec: no-such-cmd: not found")
    assert with_message(cannot, other, other.instance(0), spec).message == (
        "exec: no-such-cmd: not found"
    )


def test_the_message_is_kept_for_the_run_after_the_file_is_reused(tmp_path: Path) -> None:
    cdir = container(tmp_path)
    spec = {"name": "app"}
    prepare_message_file(cdir, spec, NOBODY)
    (cdir.root / "dev/termination-log").write_text("first run")
    assert with_message(ended(1), cdir, cdir.instance(0), spec).message == "first run"
    prepare_message_file(cdir, spec, NOBODY)  # the next run starts with an empty file
    assert (cdir.root / "dev/termination-log").read_text() == ""
    kept = with_message(ended(1), cdir, cdir.instance(0), spec, compute=False)
    assert kept.message == "first run"


def test_a_link_the_container_replaced_is_not_followed(tmp_path: Path) -> None:
    cdir = container(tmp_path)
    spec = {"name": "app"}
    prepare_message_file(cdir, spec, NOBODY)
    secret = tmp_path / "secret"
    secret.write_text("do not leak")
    link = cdir.root / "dev/termination-log"
    link.unlink()
    link.symlink_to(secret)
    assert with_message(ended(1), cdir, cdir.instance(0), spec).message is None
