"""`kubectl attach -i` on the process backend loses nothing the container answers.

Attach shows what the main process writes from the moment it attached, and writes
the client's input into the process's stdin. The container may answer the first
input before vkpy's log reader has got going (its file reads run in worker threads,
which may all be busy on a loaded node): that answer must still reach the client.
The test makes that ordering certain with a single worker thread kept busy until
the container's answer is in its log file.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from tests.unit.providers.process.test_process_provider import REF, container, make, pod, until
from vkpy.providers.base import StreamIO
from vkpy.providers.process.logfile import format_record
from vkpy.providers.process.logs import LogCursor
from vkpy.providers.process.provider import ProcessProvider

ECHO = 'while read -r line; do echo "got: $line"; [ "$line" = quit ] && exit 0; done'


class Input:
    """The client's stdin: all of it at once, then the end."""

    def __init__(self, data: bytes) -> None:
        self.chunks = [data]

    async def read(self) -> bytes:
        return self.chunks.pop(0) if self.chunks else b""


class OpenInput(Input):
    """The client's stdin: the data, then nothing more, never the end."""

    async def read(self) -> bytes:
        if self.chunks:
            return self.chunks.pop(0)
        await asyncio.Event().wait()
        return b""


class Output:
    def __init__(self) -> None:
        self.data = bytearray()

    async def write(self, data: bytes) -> None:
        self.data += data

    async def close(self) -> None:
        pass


@pytest.fixture
async def provider(tmp_path: Path) -> AsyncIterator[ProcessProvider]:
    backend = make(tmp_path)
    await backend.start()
    yield backend
    for ref in await backend.list_pods():
        await backend.delete_pod(ref, 0)
    await backend.close()


def _log_holds(path: Path, text: bytes, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if path.exists() and text in path.read_bytes():
            return
        time.sleep(0.01)


async def test_the_answer_to_the_first_input_is_not_lost(
    provider: ProcessProvider, tmp_path: Path
) -> None:
    await provider.create_pod(pod(container("app", ECHO, stdin=True, stdinOnce=True)))
    await until(provider, lambda s: s.phase == "Running")
    log = tmp_path / "process/pods" / REF.uid / "containers/app/instances/0/output.log"
    loop = asyncio.get_running_loop()
    busy = ThreadPoolExecutor(max_workers=1)
    loop.set_default_executor(busy)
    # The only worker thread is busy until the container has answered "first line".
    blocker = loop.run_in_executor(busy, _log_holds, log, b"got: first line", 10.0)
    stdout = Output()
    io = StreamIO(stdin=Input(b"first line\nquit\n"), stdout=stdout, stderr=None, tty=False)
    code = await asyncio.wait_for(provider.attach_to_container(REF, "app", io), 30)
    await blocker
    assert stdout.data.decode().splitlines() == ["got: first line", "got: quit"]
    assert code == 0


async def test_without_stdin_once_the_end_of_input_ends_the_session_only(
    provider: ProcessProvider, tmp_path: Path
) -> None:
    """`stdin: true` alone: the client's end of input ends its session (as a container
    runtime does), the process keeps its stdin open and runs on."""
    await provider.create_pod(pod(container("app", ECHO, stdin=True)))
    await until(provider, lambda s: s.phase == "Running")
    io = StreamIO(stdin=Input(b"first line\n"), stdout=Output(), stderr=None, tty=False)
    code = await asyncio.wait_for(provider.attach_to_container(REF, "app", io), 30)
    assert code is None
    log = tmp_path / "process/pods" / REF.uid / "containers/app/instances/0/output.log"
    await asyncio.to_thread(_log_holds, log, b"got: first line", 30.0)
    # The same process still reads its stdin: a second session's input reaches it, and
    # that session (whose input does not end) lasts until the process ends.
    stdout = Output()
    io = StreamIO(stdin=OpenInput(b"quit\n"), stdout=stdout, stderr=None, tty=False)
    code = await asyncio.wait_for(provider.attach_to_container(REF, "app", io), 30)
    assert stdout.data.decode().splitlines() == ["got: quit"]
    assert code == 0


def test_following_from_the_end_skips_a_record_being_written(tmp_path: Path) -> None:
    path = tmp_path / "output.log"
    old = format_record(1, "stdout", b"before attach", partial=False)
    half = format_record(2, "stdout", b"written while attaching", partial=False)
    path.write_bytes(old + half[:20])
    cursor = LogCursor(path)
    cursor.skip_to_end()
    with path.open("ab") as handle:
        handle.write(half[20:] + format_record(3, "stderr", b"after", partial=False))
    try:
        assert [(r.stream, r.data) for r in cursor.read_more()] == [("stderr", b"after\n")]
    finally:
        cursor.close()
