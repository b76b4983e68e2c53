"""The process backend's exec and port-forward, on real processes and sockets, no cluster.

An instance directory with a spec.json is all the exec helper needs to enter a
"container" (environment and working directory; no cgroup, no user switch here), so
exec is exercised end to end: pipes, a pseudo-terminal with resizes, exit codes, a
cancelled session killing everything it started, and no file descriptor left open.
Port-forward runs against a local asyncio server: both directions, half-closes, and
a refused port.
"""

from __future__ import annotations

import asyncio
import os
import sys
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from vkpy.providers.base import StreamIO, TerminalSize
from vkpy.providers.errors import ProviderError
from vkpy.providers.process.layout import InstanceDir, write_json
from vkpy.providers.process.records import ProcessContext
from vkpy.providers.process.streams import exec_command, forward_port


class Source:
    def __init__(self, *chunks: bytes, hold: bool = False) -> None:
        self.chunks = list(chunks)
        self.hold = hold

    async def read(self) -> bytes:
        if self.chunks:
            return self.chunks.pop(0)
        if self.hold:
            await asyncio.Event().wait()
        return b""


class Sink:
    def __init__(self) -> None:
        self.data = bytearray()
        self.closed = False
        self.grew = asyncio.Event()

    async def write(self, data: bytes) -> None:
        self.data += data
        self.grew.set()

    async def close(self) -> None:
        self.closed = True

    async def wait_for(self, text: bytes, timeout: float = 10.0) -> None:
        async def seen() -> None:
            while text not in self.data:
                self.grew.clear()
                await self.grew.wait()

        await asyncio.wait_for(seen(), timeout)


class Sizes:
    def __init__(self) -> None:
        self.queue: asyncio.Queue[TerminalSize | None] = asyncio.Queue()

    def __aiter__(self) -> AsyncIterator[TerminalSize]:
        return self

    async def __anext__(self) -> TerminalSize:
        size = await self.queue.get()
        if size is None:
            raise StopAsyncIteration
        return size


@pytest.fixture
def instance(tmp_path: Path) -> InstanceDir:
    root = tmp_path / "root"
    root.mkdir()
    path = tmp_path / "instance"
    path.mkdir()
    env = (("PATH", os.environ.get("PATH", "/usr/bin:/bin")), ("GREETING", "hello"))
    context = ProcessContext(env=env, cwd=str(root))
    write_json(path / "spec.json", {"context": context.to_dict()})
    return InstanceDir(path, 0)


def open_fds() -> int:
    return len(os.listdir("/proc/self/fd"))


async def test_pipes_exit_code_and_context(instance: InstanceDir) -> None:
    before = open_fds()
    out, err = Sink(), Sink()
    io = StreamIO(Source(b"line one\n", b"line two\n"), out, err, tty=False)
    script = 'cat; echo "$GREETING from $(basename "$PWD")"; echo oops >&2; exit 5'
    code = await exec_command(sys.executable, instance, ["sh", "-c", script], io)
    assert code == 5
    assert out.data == b"line one\nline two\nhello from root\n"
    assert err.data == b"oops\n"
    assert open_fds() == before


async def test_command_not_found(instance: InstanceDir) -> None:
    err = Sink()
    code = await exec_command(
        sys.executable, instance, ["no-such-program"], StreamIO(None, Sink(), err, False)
    )
    assert code == 127
    assert b"no-such-program" in err.data


async def test_terminal_with_resizes(instance: InstanceDir) -> None:
    before = open_fds()
    out, sizes = Sink(), Sizes()
    stdin: asyncio.Queue[bytes] = asyncio.Queue()

    class Keyboard:
        async def read(self) -> bytes:
            return await stdin.get()

    io = StreamIO(Keyboard(), out, None, tty=True, resize=sizes)
    run = asyncio.create_task(exec_command(sys.executable, instance, ["sh"], io))
    await sizes.queue.put(TerminalSize(100, 30))
    await stdin.put(b"test -t 0 && echo is-a-tty; stty size\n")
    await out.wait_for(b"30 100")
    await sizes.queue.put(TerminalSize(132, 40))
    await asyncio.sleep(0.2)
    await stdin.put(b"stty size; exit 4\n")
    assert await asyncio.wait_for(run, 10) == 4
    assert b"is-a-tty" in out.data
    assert b"40 132" in out.data
    assert open_fds() == before


async def test_cancelling_kills_the_whole_session(instance: InstanceDir, tmp_path: Path) -> None:
    before = open_fds()
    pids = tmp_path / "pids"
    out = Sink()
    io = StreamIO(Source(hold=True), out, Sink(), tty=False)
    script = f"sleep 300 & echo $! > {pids}; echo started; wait"
    run = asyncio.create_task(exec_command(sys.executable, instance, ["sh", "-c", script], io))
    await out.wait_for(b"started")
    child = int(pids.read_text())
    assert Path(f"/proc/{child}").exists()
    run.cancel()
    with pytest.raises(asyncio.CancelledError):
        await run
    for _ in range(50):
        if not Path(f"/proc/{child}").exists() or "Z" in _state(child):
            break
        await asyncio.sleep(0.05)
    assert not Path(f"/proc/{child}").exists() or "Z" in _state(child)
    assert open_fds() == before


def _state(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return "gone"


async def test_output_left_open_by_a_background_process(
    instance: InstanceDir, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("vkpy.providers.process.streams.DRAIN_SECONDS", 0.3)
    out = Sink()
    io = StreamIO(None, out, None, tty=False)
    code = await asyncio.wait_for(
        exec_command(sys.executable, instance, ["sh", "-c", "sleep 5 & echo done"], io), 5
    )
    assert (code, bytes(out.data)) == (0, b"done\n")


async def test_port_forward_both_ways_and_half_close() -> None:
    received = bytearray()

    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        received.extend(await reader.read())  # until the client's half-close
        writer.write(b"answer after " + str(len(received)).encode())
        await writer.drain()
        writer.close()

    server = await asyncio.start_server(serve, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    out = Sink()
    async with server:
        await asyncio.wait_for(
            forward_port("127.0.0.1", port, Source(b"request ", b"body"), out), 10
        )
    assert bytes(received) == b"request body"
    assert bytes(out.data) == b"answer after 12"
    assert out.closed


async def test_port_forward_refused() -> None:
    server = await asyncio.start_server(lambda r, w: None, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    server.close()
    await server.wait_closed()
    with pytest.raises(ProviderError, match="connection refused"):
        await forward_port("127.0.0.1", port, Source(), Sink())
