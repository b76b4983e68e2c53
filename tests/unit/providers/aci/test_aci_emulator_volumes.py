"""The emulator's emptyDir volumes (tests/aci_emulator/runtime.py): real processes in
private mount namespaces share a group directory at an existing host path, and the
host path itself is never written."""

from __future__ import annotations

from pathlib import Path

from tests.aci_emulator.runtime import Container, Mount


def logs(container: Container) -> str:
    return b"".join(data for _, data in container.logs).decode()


async def test_a_file_one_container_writes_the_other_reads_and_the_host_is_untouched(
    tmp_path: Path,
) -> None:
    volume = tmp_path / "volumes" / "shared"
    volume.mkdir(parents=True)
    before = sorted(p.name for p in Path("/srv").iterdir())
    writer = Container(
        "writer", "busybox", ["sh", "-c", "echo hi > /srv/note"], {}, tmp_path, "Never",
        mounts=[Mount(volume, "/srv")],
    )  # fmt: skip
    reader = Container(
        "reader", "busybox",
        ["sh", "-c", "cat /srv/note; touch /srv/x 2>/dev/null || echo read-only"],
        {}, tmp_path, "Never", mounts=[Mount(volume, "/srv", read_only=True)],
    )  # fmt: skip
    assert await writer.run_once() == 0
    assert await reader.run_once() == 0
    assert logs(reader) == "hi\nread-only\n"
    assert (volume / "note").read_text() == "hi\n"
    assert sorted(p.name for p in Path("/srv").iterdir()) == before


async def test_a_mount_path_missing_on_the_host_is_refused_not_created(tmp_path: Path) -> None:
    target = tmp_path / "not-here"
    container = Container(
        "app", "busybox", ["true"], {}, tmp_path, "Never",
        mounts=[Mount(tmp_path, str(target))],
    )  # fmt: skip
    assert await container.run_once() == 128
    assert container.current.state == "Terminated"
    assert logs(container).startswith(f"failed to start: mount path {target} does not exist")
    assert not target.exists()


async def test_a_container_without_mounts_runs_as_a_plain_process(tmp_path: Path) -> None:
    container = Container("app", "busybox", ["sh", "-c", "echo plain"], {}, tmp_path, "Never")
    assert await container.run_once() == 0
    assert logs(container) == "plain\n"
