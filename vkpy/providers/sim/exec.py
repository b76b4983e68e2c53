"""Built-in commands for `kubectl exec` and `attach` on simulated pods, and a toy port-forward.

Sim pods run nothing, yet exec, attach and port-forward must be testable end to end
(through the API server, with the real kubectl) without a real workload. So the sim
backend understands a few commands itself, enough to exercise every stream:
`echo [-n]`, `cat`, `sha256sum`, `wc -c`, `env`, `hostname`, `sleep N|infinity`,
`true`, `false`, `exit N`, `stty size` (the size the client last sent), `sh -c
'cmd; cmd && cmd >&2'` (with `$VAR` from the container's environment), and `sh`
alone: a small shell reading commands from stdin, with a `$ ` prompt and echo of
what is typed when there is a terminal. Anything else
is "command not found" (exit 127), as a shell would say.

Attach connects to the "main process": with `stdin: true` it echoes stdin back to
stdout (like `cat`); either way it lasts until the client ends it. Port-forward
answers HTTP/1.x requests with one line naming the pod and port, and echoes
anything else back.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import math
import re
import shlex
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field

from vkpy.providers.base import ByteSink, ByteSource, PodRef, StreamIO, TerminalSize

EXIT_NOT_FOUND = 127
_CTRL_C = 0x03
_CTRL_D = 0x04
_BACKSPACES = (0x08, 0x7F)


class _Exit(Exception):
    def __init__(self, code: int) -> None:
        super().__init__(code)
        self.code = code


@dataclass
class _Context:
    """What a built-in command sees: the streams, the environment and the terminal."""

    io: StreamIO
    env: Mapping[str, str]
    hostname: str
    size: TerminalSize | None = None
    pending: bytearray = field(default_factory=bytearray)
    stdin_done: bool = False

    async def write(self, sink: ByteSink | None, data: bytes) -> None:
        if sink is None or not data:
            return
        if self.io.tty:
            data = data.replace(b"\r\n", b"\n").replace(b"\n", b"\r\n")
        await sink.write(data)

    async def out(self, text: str | bytes) -> None:
        await self.write(self.io.stdout, text.encode() if isinstance(text, str) else text)

    async def err(self, text: str) -> None:
        sink = self.io.stderr or (self.io.stdout if self.io.tty else None)
        await self.write(sink, text.encode())

    async def read(self) -> bytes:
        """The next input bytes; b"" at the end of stdin (or without stdin)."""
        if self.pending:
            data = bytes(self.pending)
            self.pending.clear()
            return data
        if self.stdin_done or self.io.stdin is None:
            return b""
        data = await self.io.stdin.read()
        if not data:
            self.stdin_done = True
        return data

    async def read_line(self) -> bytes | None:
        """One line without its newline; None at the end of input."""
        while True:
            index = self.pending.find(b"\n")
            if index >= 0:
                line = bytes(self.pending[:index])
                del self.pending[: index + 1]
                return line
            if self.stdin_done or self.io.stdin is None:
                if not self.pending:
                    return None
                line = bytes(self.pending)
                self.pending.clear()
                return line
            data = await self.io.stdin.read()
            if not data:
                self.stdin_done = True
            self.pending += data


Builtin = Callable[[_Context, Sequence[str]], Awaitable[int]]


async def _echo(ctx: _Context, args: Sequence[str]) -> int:
    newline = True
    if args and args[0] == "-n":
        newline, args = False, args[1:]
    await ctx.out(" ".join(args) + ("\n" if newline else ""))
    return 0


async def _cat(ctx: _Context, args: Sequence[str]) -> int:
    if args and args != ["-"]:
        await ctx.err(f"cat: {args[0]}: No such file or directory\n")
        return 1
    while data := await ctx.read():
        await ctx.out(data)
    return 0


async def _sha256sum(ctx: _Context, args: Sequence[str]) -> int:
    digest = hashlib.sha256()
    while data := await ctx.read():
        digest.update(data)
    await ctx.out(f"{digest.hexdigest()}  -\n")
    return 0


async def _wc(ctx: _Context, args: Sequence[str]) -> int:
    if list(args) != ["-c"]:
        await ctx.err("wc: only -c is simulated\n")
        return 1
    total = 0
    while data := await ctx.read():
        total += len(data)
    await ctx.out(f"{total}\n")
    return 0


async def _env(ctx: _Context, args: Sequence[str]) -> int:
    await ctx.out("".join(f"{name}={value}\n" for name, value in ctx.env.items()))
    return 0


async def _hostname(ctx: _Context, args: Sequence[str]) -> int:
    await ctx.out(ctx.hostname + "\n")
    return 0


async def _sleep(ctx: _Context, args: Sequence[str]) -> int:
    try:
        seconds = math.inf if args[0] == "infinity" else float(args[0])
    except (IndexError, ValueError):
        await ctx.err("sleep: invalid time interval\n")
        return 1
    if math.isinf(seconds):
        await asyncio.Event().wait()
    await asyncio.sleep(max(0.0, seconds))
    return 0


async def _true(ctx: _Context, args: Sequence[str]) -> int:
    return 0


async def _false(ctx: _Context, args: Sequence[str]) -> int:
    return 1


async def _exit(ctx: _Context, args: Sequence[str]) -> int:
    try:
        code = int(args[0]) if args else 0
    except ValueError:
        code = 2
    raise _Exit(code & 0xFF)


async def _stty(ctx: _Context, args: Sequence[str]) -> int:
    if list(args) != ["size"]:
        await ctx.err("stty: only 'stty size' is simulated\n")
        return 1
    if not ctx.io.tty:
        await ctx.err("stty: 'standard input': Inappropriate ioctl for device\n")
        return 1
    size = ctx.size or TerminalSize(80, 24)
    await ctx.out(f"{size.height} {size.width}\n")
    return 0


async def _sh(ctx: _Context, args: Sequence[str]) -> int:
    if args[:1] == ["-c"]:
        if len(args) < 2:
            await ctx.err("sh: -c: option requires an argument\n")
            return 2
        try:
            return await run_script(ctx, args[1])
        except _Exit as done:
            return done.code
    return await _shell(ctx)


BUILTINS: dict[str, Builtin] = {
    "echo": _echo,
    "cat": _cat,
    "sha256sum": _sha256sum,
    "wc": _wc,
    "env": _env,
    "hostname": _hostname,
    "sleep": _sleep,
    "true": _true,
    "false": _false,
    "exit": _exit,
    "stty": _stty,
    "sh": _sh,
}


async def run_argv(ctx: _Context, argv: Sequence[str]) -> int:
    name = argv[0].rsplit("/", 1)[-1]
    builtin = BUILTINS.get(name)
    if builtin is None:
        await ctx.err(f"sh: {argv[0]}: not found\n")
        return EXIT_NOT_FOUND
    return await builtin(ctx, list(argv[1:]))


async def run_script(ctx: _Context, script: str) -> int:
    """Run `cmd; cmd && cmd || cmd`, with `>&2` sending a command's stdout to stderr."""
    try:
        lexer = shlex.shlex(script, posix=True, punctuation_chars=";&|>")
        lexer.whitespace_split = True
        tokens = list(lexer)
    except ValueError as error:
        await ctx.err(f"sh: syntax error: {error}\n")
        return 2
    tokens = [_expand(word, ctx.env) for word in tokens]
    code = 0
    argv: list[str] = []
    skip = False
    for word in [*tokens, ";"]:
        if word not in (";", "&&", "||", "\n"):
            argv.append(word)
            continue
        if argv and not skip:
            code = await _run_with_redirect(ctx, argv)
        argv = []
        skip = (word == "&&" and code != 0) or (word == "||" and code == 0)
    return code


_VARIABLE = re.compile(r"\$(?:\{(\w+)\}|(\w+))")


def _expand(word: str, env: Mapping[str, str]) -> str:
    """`$NAME` and `${NAME}` from the container's environment (quoting is not honoured)."""
    return _VARIABLE.sub(lambda m: env.get(m.group(1) or m.group(2), ""), word)


async def _run_with_redirect(ctx: _Context, argv: list[str]) -> int:
    to_stderr = False
    if len(argv) >= 2 and argv[-2] in (">&", "1>&") and argv[-1] == "2":
        argv, to_stderr = argv[:-2], True
    if not argv:
        return 0
    if not to_stderr:
        return await run_argv(ctx, argv)
    io = ctx.io
    redirected = StreamIO(io.stdin, io.stderr or (io.stdout if io.tty else None), io.stderr, io.tty)
    inner = _Context(redirected, ctx.env, ctx.hostname, ctx.size, ctx.pending, ctx.stdin_done)
    try:
        return await run_argv(inner, argv)
    finally:
        ctx.stdin_done = inner.stdin_done


async def _shell(ctx: _Context) -> int:
    """`sh` without `-c`: commands from stdin, with a prompt and echo on a terminal."""
    code = 0
    while True:
        if ctx.io.tty:
            await ctx.out("$ ")
            line = await _read_terminal_line(ctx)
        else:
            raw = await ctx.read_line()
            line = None if raw is None else raw.decode(errors="replace")
        if line is None:
            return code
        try:
            code = await run_script(ctx, line)
        except _Exit as done:
            return done.code


async def _read_terminal_line(ctx: _Context) -> str | None:
    """A line typed on the terminal, echoed as a terminal in cooked mode would."""
    line = bytearray()
    while True:
        data = await ctx.read()
        if not data:
            return None
        for index, byte in enumerate(data):
            if byte in (0x0D, 0x0A):
                await ctx.out(b"\r\n")
                ctx.pending[:0] = data[index + 1 :]
                return line.decode(errors="replace")
            if byte == _CTRL_D and not line:
                await ctx.out(b"exit\r\n")
                return None
            if byte == _CTRL_C:
                await ctx.out(b"^C\r\n$ ")
                line.clear()
            elif byte in _BACKSPACES:
                if line:
                    line.pop()
                    await ctx.out(b"\b \b")
            else:
                line.append(byte)
                await ctx.out(bytes((byte,)))


async def _follow_resizes(ctx: _Context) -> None:
    if ctx.io.resize is None:
        return
    async for size in ctx.io.resize:
        ctx.size = size


async def exec_builtin(
    ref: PodRef, env: Mapping[str, str], command: Sequence[str], io: StreamIO
) -> int:
    """Run one built-in command line as `kubectl exec` would run it in a container."""
    ctx = _Context(io, env, ref.name)
    resizes = asyncio.create_task(_follow_resizes(ctx), name=f"sim-resize {ref}")
    try:
        if not command:
            return 0
        try:
            return await run_argv(ctx, command)
        except _Exit as done:
            return done.code
    finally:
        resizes.cancel()
        await asyncio.wait({resizes})
        await _close(io.stdout)
        await _close(io.stderr)


async def _close(sink: ByteSink | None) -> None:
    if sink is not None:
        with contextlib.suppress(ConnectionError):
            await sink.close()


async def attach_echo(io: StreamIO, ended: asyncio.Event) -> None:
    """The sim main process: echo stdin to stdout until stdin ends or the container stops."""

    async def echo() -> None:
        if io.stdin is None or io.stdout is None:
            await ended.wait()
            return
        while data := await io.stdin.read():
            await io.stdout.write(data)

    copier = asyncio.create_task(echo(), name="sim-attach")
    stopper = asyncio.create_task(ended.wait(), name="sim-attach-end")
    try:
        await asyncio.wait({copier, stopper}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for task in (copier, stopper):
            task.cancel()
        await asyncio.wait({copier, stopper})
    if copier.done() and not copier.cancelled() and copier.exception() is not None:
        raise copier.exception()  # type: ignore[misc]


_HTTP_METHODS = (b"GET ", b"HEAD ", b"POST ", b"PUT ", b"DELETE ", b"OPTIONS ")


def _maybe_http(received: bytes) -> bool:
    """Could these first bytes still be the start of an HTTP request?"""
    return any(
        received.startswith(method) or method.startswith(received) for method in _HTTP_METHODS
    )


async def serve_port(ref: PodRef, port: int, inbound: ByteSource, outbound: ByteSink) -> None:
    """One forwarded connection to a sim pod: a one-line HTTP answer, or an echo."""
    received = bytearray()
    while data := await inbound.read():
        received += data
        if not _maybe_http(bytes(received)):
            await outbound.write(bytes(received))
            while data := await inbound.read():
                await outbound.write(data)
            break
        if b"\r\n\r\n" in received:
            await outbound.write(_http_answer(ref, port, bytes(received)))
            break
    await outbound.close()


def _http_answer(ref: PodRef, port: int, request: bytes) -> bytes:
    line = request.split(b"\r\n", 1)[0].decode("latin-1")
    parts = line.split(" ")
    path = parts[1] if len(parts) > 1 else "/"
    body = f"sim pod {ref.namespace}/{ref.name} port {port} path {path}\n".encode()
    head = (
        "HTTP/1.0 200 OK\r\nContent-Type: text/plain\r\n"
        f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n"
    )
    return head.encode() + (b"" if line.startswith("HEAD ") else body)
