"""`kubectl exec <pod> -- invoke '<json>'`: what exec means for a Lambda function.

A function has no shell to run commands in; the one thing to do with it is invoke
it. So the exec command `invoke [JSON]` invokes the function synchronously with
that payload (or with stdin when no argument is given and stdin is attached, or
`{}`), writes the function's response to stdout and returns 0, or 1 when the
function reported an error (its error payload goes to stdout, the error type to
stderr). Any other command gets a message on stderr and exit code 126, as a shell
does for a command it cannot run.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass

from vkpy.providers.base import ByteSink, ByteSource, StreamIO

NOT_EXECUTABLE = 126
USAGE_ERROR = 2
FUNCTION_ERROR = 1
MAX_PAYLOAD = 6 * 2**20
"""Lambda's limit for a synchronous invocation's payload."""

USAGE = (
    "a Lambda pod runs a function, not commands; use: invoke '<json payload>' "
    "(or invoke with the payload on stdin)"
)


@dataclass(frozen=True)
class InvokeResult:
    payload: bytes
    function_error: str | None = None


Invoker = Callable[[bytes], Awaitable[InvokeResult]]


class CommandError(Exception):
    """The exec command is not a valid invocation; `code` is the exit code to return."""

    def __init__(self, message: str, code: int) -> None:
        super().__init__(message)
        self.code = code


async def _read_all(source: ByteSource) -> bytes:
    chunks: list[bytes] = []
    size = 0
    while chunk := await source.read():
        size += len(chunk)
        if size > MAX_PAYLOAD:
            raise CommandError(f"invoke: the payload exceeds {MAX_PAYLOAD} bytes", USAGE_ERROR)
        chunks.append(chunk)
    return b"".join(chunks)


async def payload_of(command: Sequence[str], stdin: ByteSource | None) -> bytes:
    """The JSON payload an exec command asks to invoke with; CommandError otherwise."""
    if not command or command[0] != "invoke":
        raise CommandError(USAGE, NOT_EXECUTABLE)
    if len(command) > 2:
        raise CommandError("invoke takes one argument, the JSON payload; " + USAGE, USAGE_ERROR)
    if len(command) == 2:
        payload = command[1].encode()
    elif stdin is not None:
        payload = await _read_all(stdin)
    else:
        payload = b"{}"
    if not payload.strip():
        payload = b"{}"
    try:
        json.loads(payload)
    except ValueError as error:
        raise CommandError(f"invoke: the payload is not valid JSON: {error}", USAGE_ERROR) from None
    if len(payload) > MAX_PAYLOAD:
        raise CommandError(f"invoke: the payload exceeds {MAX_PAYLOAD} bytes", USAGE_ERROR)
    return payload


async def _write(sink: ByteSink | None, data: bytes) -> None:
    if sink is not None and data:
        await sink.write(data if data.endswith(b"\n") else data + b"\n")


async def run(command: Sequence[str], io: StreamIO, invoke: Invoker) -> int:
    """Carry out an exec command on a function; the exit code."""
    try:
        payload = await payload_of(command, io.stdin)
    except CommandError as error:
        await _write(io.stderr or io.stdout, str(error).encode())
        return error.code
    result = await invoke(payload)
    await _write(io.stdout, result.payload)
    if result.function_error:
        await _write(io.stderr, f"function error: {result.function_error}".encode())
        return FUNCTION_ERROR
    return 0
