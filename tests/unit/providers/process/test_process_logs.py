"""Reading log files in batches: rotated files first, in order, then following the
current file across a rotation, with nothing lost or repeated."""

from __future__ import annotations

from pathlib import Path

import pytest

from vkpy.providers.process import logs
from vkpy.providers.process.logfile import LogWriter
from vkpy.providers.process.logs import LogCursor


def numbers(cursor: LogCursor, more: bool = False) -> list[int]:
    out: list[int] = []
    if more:
        while records := cursor.read_more():
            out += [int(r.data) for r in records]
        return out
    while (batch := cursor.read_batch()) is not None:
        out += [int(r.data) for r in batch]
    return out


def test_batches_cover_the_rotated_files_then_follow_across_a_rotation(tmp_path: Path) -> None:
    path = tmp_path / "output.log"
    writer = LogWriter(path, max_bytes=4096, max_files=3)
    for n in range(200):  # about 6 KiB: one rotation
        writer.write("stdout", f"{n}\n".encode())
    cursor = LogCursor(path)
    try:
        seen = numbers(cursor)
        assert seen == list(range(200))
        for n in range(200, 290):  # the file being read is rotated away meanwhile
            writer.write("stdout", f"{n}\n".encode())
        assert path.with_name("output.log.2").exists()  # (rotated twice in all)
        seen += numbers(cursor, more=True)
        seen += numbers(cursor, more=True)
        assert seen == list(range(290))
    finally:
        cursor.close()
        writer.close()


def test_small_batches_give_the_same_records(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(logs, "BATCH", 100)  # lines split across batches
    path = tmp_path / "output.log"
    writer = LogWriter(path, max_bytes=4096, max_files=5)
    for n in range(300):
        writer.write("stdout", f"{n}\n".encode())
    cursor = LogCursor(path)
    try:
        assert numbers(cursor) == list(range(300))
    finally:
        cursor.close()
        writer.close()
