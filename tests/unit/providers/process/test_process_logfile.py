"""CRI-format container log lines, splitting, and size-based rotation."""

from pathlib import Path

from vkpy.providers.process.logfile import (
    LogWriter,
    Record,
    format_record,
    log_files,
    parse_record,
    parse_rfc3339_nano,
    rfc3339_nano,
    split_output,
)

NS = 1_796_044_817_137_007_148


def test_timestamps_have_nine_digits_and_round_trip() -> None:
    assert rfc3339_nano(NS) == "2026-11-30T13:20:17.137007148Z"
    assert rfc3339_nano(1_000_000_000) == "1970-01-01T00:00:01.000000000Z"
    assert parse_rfc3339_nano(rfc3339_nano(NS)) == NS
    assert parse_rfc3339_nano("2026-11-30T13:20:17.5Z") == 1_796_044_817_500_000_000
    assert parse_rfc3339_nano("2026-11-30T13:20:17Z") == 1_796_044_817_000_000_000


def test_lines_are_formatted_and_parsed_back() -> None:
    full = format_record(NS, "stdout", b"hello world", partial=False)
    assert full == b"2026-11-30T13:20:17.137007148Z stdout F hello world\n"
    assert parse_record(full[:-1]) == Record(NS, "stdout", False, b"hello world\n")
    part = format_record(NS, "stderr", b"prompt> ", partial=True)
    assert parse_record(part[:-1]) == Record(NS, "stderr", True, b"prompt> ")
    empty = format_record(NS, "stdout", b"", partial=False)
    assert parse_record(empty[:-1]) == Record(NS, "stdout", False, b"\n")
    for bad in (b"", b"nonsense", b"2026-11-30T13:20:17Z stdin F x", b"2026 stdout F x"):
        assert parse_record(bad) is None


def test_output_is_split_into_lines_and_partials() -> None:
    assert list(split_output(b"a\nb\nc")) == [(b"a", False), (b"b", False), (b"c", True)]
    assert list(split_output(b"\n\n")) == [(b"", False), (b"", False)]
    assert list(split_output(b"x" * 10 + b"\n", max_line=4)) == [
        (b"xxxx", True),
        (b"xxxx", True),
        (b"xx", False),
    ]


def test_rotation_keeps_max_files(tmp_path: Path) -> None:
    path = tmp_path / "output.log"
    writer = LogWriter(path, max_bytes=4096, max_files=3)
    for n in range(400):
        writer.write("stdout", f"line {n:04d} {'x' * 40}\n".encode())
    writer.close()
    files = log_files(path)
    assert [f.name for f in files] == ["output.log.2", "output.log.1", "output.log"]
    records = [parse_record(line) for f in files for line in f.read_bytes().splitlines()]
    numbers = [int(r.data.split()[1]) for r in records if r is not None]
    assert numbers == list(range(numbers[0], 400))  # oldest dropped, order kept
    assert numbers[0] > 0
    assert all(f.stat().st_size < 4096 + 100 for f in files)


def test_a_single_file_is_truncated_on_rotation(tmp_path: Path) -> None:
    path = tmp_path / "output.log"
    writer = LogWriter(path, max_bytes=4096, max_files=1)
    for _ in range(200):
        writer.write("stderr", b"y" * 60 + b"\n")
    writer.close()
    assert log_files(path) == [path]
    assert path.stat().st_size < 4096
