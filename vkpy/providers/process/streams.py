"""`kubectl exec`, `attach` and `port-forward` for containers that are host processes.

- exec runs the command through the exec helper (enter.py), so it starts in the
  container's context: its cgroup, user, environment and working directory (whose
  links are the container's mounts). Without a terminal its stdin, stdout and stderr
  are pipes; with one (`-t`) they are a pseudo-terminal that the helper makes the
  session's controlling terminal, and every size the client sends is applied to it
  (TIOCSWINSZ, which delivers SIGWINCH). In `runtime: oci` the command is `runc exec
  -t`, which holds no controlling terminal: it makes the container's own terminal and
  relays sizes to it when told with SIGWINCH, which is sent to its session with each
  size. The command runs in a session of its own:
  when the client goes away the whole session is killed. When the command ends, its
  output is read to the end (for at most DRAIN_SECONDS, in case something it left
  behind holds the pipe) and its exit code returned.
- attach follows what the main process writes to its log from now on and, for
  containers with `stdin: true`, writes the client's input into the FIFO the
  supervisor keeps as the process's stdin (records.STDIN_FIFO); for `tty: true`
  containers the supervisor copies that FIFO into the container's terminal, and the
  client's window sizes are set on the terminal's device.
- port-forward connects to the address a process of the pod listens on for that
  port (listening.py; pods share the host's network, so nothing else of the host is
  reached), or connects inside the pod's own network namespace
  (podnet.py), and copies both ways, half-closing as each side finishes.

All file descriptors are non-blocking and driven by the event loop's readers and
writers, owned here and closed in every case, so sessions leak nothing.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import fcntl
import logging
import os
import pty
import signal
import socket
import struct
import termios
from collections.abc import Callable, Mapping, Sequence

from vkpy.providers.base import ByteSink, ByteSource, LogQuery, StreamIO, TerminalSize
from vkpy.providers.errors import InvalidInputError, NotFoundError, ProviderError
from vkpy.providers.process import proc
from vkpy.providers.process.container import ContainerRunner
from vkpy.providers.process.layout import InstanceDir, read_json
from vkpy.providers.process.logs import LogCursor, follow
from vkpy.providers.process.records import STDIN_FIFO, ExitRecord
from vkpy.providers.process.supervision import helper_argv, helper_env

log = logging.getLogger(__name__)

DRAIN_SECONDS = 2.0
"""After the command ended, how long its output is still read."""
CHUNK = 64 * 1024
DEFAULT_SIZE = TerminalSize(80, 24)


class AsyncFd:
    """A non-blocking file descriptor read and written through the event loop."""

    def __init__(self, fd: int) -> None:
        os.set_blocking(fd, False)
        self.fd = fd
        self._loop = asyncio.get_running_loop()

    @property
    def closed(self) -> bool:
        return self.fd < 0

    async def _ready(self, writing: bool) -> None:
        future: asyncio.Future[None] = self._loop.create_future()

        def wake() -> None:
            if not future.done():
                future.set_result(None)

        add, remove = (
            (self._loop.add_writer, self._loop.remove_writer)
            if writing
            else (self._loop.add_reader, self._loop.remove_reader)
        )
        fd = self.fd
        add(fd, wake)
        try:
            await future
        finally:
            remove(fd)

    async def read(self) -> bytes:
        """The next bytes; b"" at the end (EOF, or EIO: a terminal whose other side closed)."""
        while self.fd >= 0:
            try:
                return os.read(self.fd, CHUNK)
            except BlockingIOError:
                await self._ready(writing=False)
            except OSError as error:
                if error.errno == errno.EIO:
                    return b""
                raise
        return b""

    async def write(self, data: bytes) -> None:
        """Write everything; BrokenPipeError when the reader is gone."""
        view = memoryview(data)
        while view:
            if self.fd < 0:
                raise BrokenPipeError("closed")
            try:
                written = os.write(self.fd, view)
            except BlockingIOError:
                await self._ready(writing=True)
                continue
            view = view[written:]

    def close(self) -> None:
        if self.fd >= 0:
            fd, self.fd = self.fd, -1
            os.close(fd)


def _exit_code(returncode: int) -> int:
    return 128 - returncode if returncode < 0 else returncode


def _kill_session(pid: int) -> None:
    """SIGKILL the process group and every process of the session `pid` leads."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pid, signal.SIGKILL)
    for member in proc.session_members(pid):
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(member.pid, signal.SIGKILL)


def running_instance(runner: ContainerRunner | None, container: str) -> InstanceDir:
    """The instance of a container that runs now (the context exec enters)."""
    if runner is None:
        raise NotFoundError(f'container "{container}" not found')
    if runner.supervised is None or not runner.supervised.alive or runner.instance < 0:
        raise InvalidInputError(f'container "{container}" is not running')
    return runner.dir.instance(runner.instance)


# --- exec --------------------------------------------------------------------------------------


async def exec_command(
    python: str, instance: InstanceDir, command: Sequence[str], io: StreamIO
) -> int:
    """Run `command` in the container of `instance`; its exit code. See the module docstring."""
    if not command:
        raise InvalidInputError("no command to run")
    helper = helper_argv(python, "enter")
    if io.tty:
        return await _exec_terminal([*helper, "--tty", str(instance.path), *command], io)
    return await _exec_pipes([*helper, str(instance.path), *command], io)


async def exec_argv(argv: Sequence[str], io: StreamIO) -> int:
    """Run a whole command line (`runc exec ...`, `runtime: oci`) as exec_command runs
    its helper: on a terminal with `io.tty`, else on pipes; its exit code."""
    if io.tty:
        return await _exec_terminal(list(argv), io, signal_sizes=True)
    return await _exec_pipes(list(argv), io)


async def _pump_in(source: ByteSource | None, target: AsyncFd) -> None:
    """Client input into the command until either ends; then the command sees the end."""
    try:
        if source is not None:
            while data := await source.read():
                await target.write(data)
    except OSError:
        pass  # the command closed its input or ended
    finally:
        target.close()


async def _pump_out(source: AsyncFd, sink: ByteSink) -> None:
    while data := await source.read():
        await sink.write(data)


async def _follow_sizes(io: StreamIO, terminal: AsyncFd, session: int | None = None) -> None:
    """Each size the client sends onto the terminal; with `session`, whose command does
    not hold the terminal as its controlling one (`runc exec -t`, which relays sizes
    to the container's own terminal when it gets SIGWINCH), the session is told."""
    if io.resize is None:
        return
    async for size in io.resize:
        if terminal.closed:
            return
        _set_size(terminal.fd, size)
        if session is not None:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(session, signal.SIGWINCH)


def _set_size(fd: int, size: TerminalSize) -> None:
    with contextlib.suppress(OSError):
        fcntl.ioctl(fd, termios.TIOCSWINSZ, struct.pack("HHHH", size.height, size.width, 0, 0))


async def _run(
    argv: list[str],
    child_fds: tuple[int, int, int],
    inputs: AsyncFd | None,
    outputs: list[tuple[AsyncFd, ByteSink]],
    io: StreamIO,
    terminal: AsyncFd | None,
    signal_sizes: bool = False,
) -> int:
    """Start the helper on `child_fds` and run the pumps around it until it ends
    (`signal_sizes`: see _follow_sizes)."""
    owned = [fd for fd, _ in outputs]
    owned += [fd for fd in (inputs, terminal) if fd is not None]
    try:
        process = await asyncio.create_subprocess_exec(
            *argv,
            stdin=child_fds[0],
            stdout=child_fds[1],
            stderr=child_fds[2],
            env=helper_env(),
            start_new_session=True,
        )
    except OSError as error:
        for owned_fd in owned:
            owned_fd.close()
        raise ProviderError(f"cannot start the exec helper: {error}") from error
    finally:
        for child_fd in set(child_fds):
            os.close(child_fd)
    tasks: list[asyncio.Task[None]] = []
    try:
        readers = [
            asyncio.create_task(_pump_out(fd, sink), name="exec-output") for fd, sink in outputs
        ]
        tasks += readers
        if inputs is not None:
            tasks.append(asyncio.create_task(_pump_in(io.stdin, inputs), name="exec-input"))
        if terminal is not None:
            session = process.pid if signal_sizes else None
            resizes = _follow_sizes(io, terminal, session)
            tasks.append(asyncio.create_task(resizes, name="exec-resize"))
        returncode = await process.wait()
        if readers:
            await asyncio.wait(readers, timeout=DRAIN_SECONDS)
        for task in readers:
            if task.done() and not task.cancelled() and task.exception() is not None:
                raise task.exception()  # type: ignore[misc]
        return _exit_code(returncode)
    except BaseException:
        _kill_session(process.pid)
        if process.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                process.kill()
            await asyncio.shield(process.wait())
        raise
    finally:
        for task in tasks:
            task.cancel()
        if tasks:
            await asyncio.wait(tasks)
        for fd in owned:
            fd.close()


async def _exec_pipes(argv: list[str], io: StreamIO) -> int:
    fds: list[int] = []
    try:
        if io.stdin is not None:
            stdin_child, stdin_ours = os.pipe()
            fds += [stdin_child, stdin_ours]
        else:
            stdin_child = os.open(os.devnull, os.O_RDONLY)
            fds.append(stdin_child)
        outputs: list[tuple[AsyncFd, ByteSink]] = []
        ends: list[int] = []
        for sink in (io.stdout, io.stderr):
            if sink is None:
                end = os.open(os.devnull, os.O_WRONLY)
                fds.append(end)
            else:
                ours, end = os.pipe()
                fds += [ours, end]
                outputs.append((AsyncFd(ours), sink))
            ends.append(end)
    except BaseException:
        for fd in fds:
            os.close(fd)
        raise
    inputs = AsyncFd(stdin_ours) if io.stdin is not None else None
    return await _run(argv, (stdin_child, ends[0], ends[1]), inputs, outputs, io, None)


async def _exec_terminal(argv: list[str], io: StreamIO, signal_sizes: bool = False) -> int:
    master, slave = pty.openpty()
    _set_size(master, DEFAULT_SIZE)
    terminal = AsyncFd(master)
    writer = AsyncFd(os.dup(master))
    outputs: list[tuple[AsyncFd, ByteSink]] = [(terminal, io.stdout)] if io.stdout else []
    try:
        return await _run(argv, (slave, slave, slave), writer, outputs, io, terminal, signal_sizes)
    finally:
        terminal.close()


# --- attach ------------------------------------------------------------------------------------


async def _feed_stdin(instance: InstanceDir, source: ByteSource) -> None:
    """Client input into the main process's stdin FIFO, or nowhere without one."""
    path = instance.path / STDIN_FIFO
    try:
        fd = os.open(path, os.O_WRONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError:
        fd = -1
    if fd < 0:
        while await source.read():
            pass  # the container has no stdin: what the client types goes nowhere
        return
    target = AsyncFd(fd)
    try:
        while data := await source.read():
            await target.write(data)
    except OSError:
        pass
    finally:
        target.close()


async def _resize_terminal(device: str, io: StreamIO) -> None:
    """The client's window sizes onto a tty container's terminal (the kernel tells the
    foreground process with SIGWINCH)."""
    if io.resize is None:
        return
    try:
        fd = os.open(device, os.O_RDWR | os.O_NOCTTY | os.O_CLOEXEC)
    except OSError:
        return
    try:
        async for size in io.resize:
            _set_size(fd, size)
    finally:
        os.close(fd)


def session_ends_with_stdin(spec: Mapping[str, object], io: StreamIO) -> bool:
    """Whether the end of the client's stdin ends the attach session, as a container
    runtime decides: yes for a container with stdin, unless it is `stdinOnce` without
    a tty (then its stdin is closed instead and the session lasts as long as the
    process). A container without stdin ignores the client's input."""
    if io.stdin is None or not spec.get("stdin"):
        return False
    return not (spec.get("stdinOnce") and not spec.get("tty"))


async def attach(runner: ContainerRunner, io: StreamIO) -> int | None:
    """Connect the client to the running main process until it ends (or the client
    leaves, or its stdin ends: `session_ends_with_stdin`).

    The output is followed from the end of the log as it is before the first byte of
    input goes in: whatever the process answers to the client's input is after that
    point, however late the log reader gets going."""
    instance = running_instance(runner, runner.config.name)
    number = runner.instance
    cursor = LogCursor(instance.log)
    cursor.skip_to_end()
    feeder: asyncio.Task[None] | None = None
    if io.stdin is not None:
        feeder = asyncio.create_task(_feed_stdin(instance, io.stdin), name="attach-stdin")
    sizes: asyncio.Task[None] | None = None
    run = runner.run_record
    if io.tty and run is not None and run.tty:
        sizes = asyncio.create_task(_resize_terminal(run.tty, io), name="attach-resize")
    query = LogQuery(container=runner.config.name, follow=True)
    records = aiter(follow(instance, cursor, query))

    async def copy_output() -> None:
        async for record in records:
            sink = io.stderr if record.stream == "stderr" and io.stderr is not None else io.stdout
            if sink is not None:
                await sink.write(record.data)

    output = asyncio.create_task(copy_output(), name="attach-output")
    try:
        if feeder is not None and session_ends_with_stdin(runner.config.spec, io):
            await asyncio.wait({output, feeder}, return_when=asyncio.FIRST_COMPLETED)
            if output.done():
                await output
            else:
                return None  # the client's stdin ended the session; the process runs on
        else:
            await output
    finally:
        output.cancel()
        await asyncio.wait({output})
        aclose = getattr(records, "aclose", None)
        if aclose is not None:
            await aclose()
        cursor.close()
        for task in (feeder, sizes):
            if task is not None:
                task.cancel()
                await asyncio.wait({task})
    if runner.instance == number:
        ended = read_json(instance.exit)
        if ended is not None:
            return ExitRecord.from_dict(ended).exit_code
    return None


# --- port-forward ------------------------------------------------------------------------------


async def forward_port(
    host: str,
    port: int,
    inbound: ByteSource,
    outbound: ByteSink,
    connect: Callable[[], socket.socket] | None = None,
) -> None:
    """Carry one connection to `host:port` until both directions are done; `connect`
    (run in a thread) makes the connection instead, elsewhere than in vkpy's network
    namespace (podnet.connect_in)."""
    try:
        if connect is not None:
            sock = await asyncio.to_thread(connect)
            reader, writer = await asyncio.open_connection(sock=sock)
        else:
            reader, writer = await asyncio.open_connection(host, port)
    except ConnectionRefusedError:
        raise ProviderError(f"dial tcp {host}:{port}: connect: connection refused") from None
    except OSError as error:
        raise ProviderError(f"dial tcp {host}:{port}: {error.strerror or error}") from None

    async def upstream() -> None:
        try:
            while data := await inbound.read():
                writer.write(data)
                await writer.drain()
            if writer.can_write_eof():
                writer.write_eof()
        except OSError:
            pass

    async def downstream() -> None:
        try:
            while data := await reader.read(CHUNK):
                await outbound.write(data)
        except OSError:
            pass
        finally:
            await outbound.close()

    tasks = [
        asyncio.create_task(upstream(), name=f"forward-up {port}"),
        asyncio.create_task(downstream(), name=f"forward-down {port}"),
    ]
    up, down = tasks
    try:
        await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
        if down.done():
            # The pod closed: the client has DRAIN_SECONDS to finish its side.
            await asyncio.wait({up}, timeout=DRAIN_SECONDS)
        else:
            await down  # the client half-closed: the pod may still answer
    finally:
        for task in tasks:
            task.cancel()
        await asyncio.wait(tasks)
        writer.close()
        with contextlib.suppress(OSError):
            await writer.wait_closed()
