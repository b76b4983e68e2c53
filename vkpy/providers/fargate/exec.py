"""`kubectl exec` on a Fargate task through ECS Exec.

`ecs:ExecuteCommand` (always interactive: ECS accepts no other mode) returns a
Session Manager session; `DataChannel` carries it. The command is wrapped
(`exec_command`) so that stdin, raw output and the exit status survive the
session's terminal. AWS's refusals become errors that say what to do: the task was
started without ECS Exec, vkpy's identity lacks a permission, the task is stopping,
the session expired.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Sequence

import aiohttp

from vkpy.providers.aws.clients import AwsClients
from vkpy.providers.aws.retry import AwsApiError
from vkpy.providers.base import StreamIO, TerminalSize
from vkpy.providers.errors import ProviderError, UnsupportedError
from vkpy.providers.fargate.exec_command import OutputFilter, StdinEncoder, command_line
from vkpy.providers.fargate.ssm_session import DataChannel, Resume, Session, SessionEnded
from vkpy.streams import ssm_channel
from vkpy.streams.ssm_channel import PayloadType

log = logging.getLogger(__name__)

NOT_ENABLED = (
    "ECS Exec cannot reach task {task}: either the task was started without ECS Exec "
    "(set `enable_execute_command: true` in the fargate provider config and re-create "
    "pods started before), or its SSM agent is not running yet (wait a few seconds), "
    "or the task role lacks ssmmessages:CreateControlChannel, CreateDataChannel, "
    "OpenControlChannel and OpenDataChannel. ECS said: {message}"
)
DENIED = (
    "vkpy's AWS identity may not use ECS Exec on task {task}: it needs ecs:ExecuteCommand "
    "on the task (and ssm:ResumeSession, ssm:TerminateSession on its sessions). "
    "AWS said: {message}"
)
NO_EXIT_CODE = (
    "the command's exit code is unknown: ECS Exec's channel does not carry exit codes "
    "and the command's wrapper did not report one (the image needs /bin/sh; the "
    "command may have been killed)"
)


def _exec_error(error: ProviderError, task: str) -> ProviderError:
    if not isinstance(error, AwsApiError):
        return error
    message = str(error)
    if error.code == "TargetNotConnectedException":
        text = NOT_ENABLED.format(task=task, message=message)
        return ProviderError(text, reason="ExecNotEnabled")
    if error.code in ("AccessDeniedException", "AccessDenied", "UnauthorizedOperation"):
        return ProviderError(DENIED.format(task=task, message=message), reason="ExecDenied")
    return ProviderError(f"ECS Exec on task {task} failed: {message}", reason="ExecFailed")


class Exec:
    """ECS Exec sessions for one cluster."""

    def __init__(self, clients: AwsClients, cluster: str) -> None:
        self._clients = clients
        self._cluster = cluster

    async def run(self, task: str, container: str, argv: Sequence[str], io: StreamIO) -> int:
        command = command_line(argv, stdin=io.stdin is not None, tty=io.tty)
        try:
            answer = await self._clients.call(
                "ecs",
                "execute_command",
                cluster=self._cluster,
                task=task,
                container=container,
                command=command,
                interactive=True,
            )
        except ProviderError as error:
            raise _exec_error(error, task) from error
        raw = answer.get("session") or {}
        session = Session(
            str(raw.get("sessionId") or ""),
            str(raw.get("streamUrl") or ""),
            str(raw.get("tokenValue") or ""),
        )
        if not session.stream_url or not session.token:
            raise ProviderError(f"ECS Exec on task {task} returned no session", reason="ExecFailed")
        log.info("ECS Exec session", extra={"task": task, "session": session.session_id})
        closed = False
        try:
            async with (
                aiohttp.ClientSession() as http,
                DataChannel(http, session, self._resumer(session)) as channel,
            ):
                code = await _carry(channel, io)
                closed = channel.closed
                return code
        finally:
            if not closed:  # ended early, cancelled or failed: end the session (and its command)
                with contextlib.suppress(ProviderError):
                    await self._clients.call(
                        "ssm", "terminate_session", SessionId=session.session_id
                    )

    def _resumer(self, session: Session) -> Resume:
        async def resume() -> str | None:
            try:
                answer = await self._clients.call(
                    "ssm", "resume_session", SessionId=session.session_id
                )
            except AwsApiError as error:
                if error.code in ("DoesNotExistException", "InvalidParameters"):
                    return None
                raise
            token = answer.get("TokenValue")
            return str(token) if token else None

        return resume


async def _carry(channel: DataChannel, io: StreamIO) -> int:
    """Copy stdin and sizes in, output out, until the agent closes; the exit code."""
    await channel.ready()
    filtered = OutputFilter()
    started = asyncio.Event()
    exited = asyncio.Event()

    async def copy_in() -> None:
        if io.stdin is None:
            return
        await started.wait()
        encoder = None if io.tty else StdinEncoder()
        while not exited.is_set():
            data = await io.stdin.read()
            if not data:
                break
            await channel.send(PayloadType.OUTPUT, encoder.feed(data) if encoder else data)
        if encoder is not None and not exited.is_set():
            await channel.send(PayloadType.OUTPUT, encoder.finish())

    async def sizes() -> None:
        if io.resize is None:
            return
        size: TerminalSize
        async for size in io.resize:
            await channel.send(PayloadType.SIZE, ssm_channel.size_payload(size.width, size.height))

    exit_code: int | None = None
    try:
        async with asyncio.TaskGroup() as group:
            feeders = [group.create_task(copy_in()), group.create_task(sizes())]
            async for event in channel.output():
                if event.payload_type in (PayloadType.OUTPUT, PayloadType.STDERR):
                    stderr = event.payload_type == PayloadType.STDERR
                    sink = io.stderr if stderr else io.stdout
                    data = filtered.feed(event.payload)
                    if filtered.ready:
                        started.set()
                    if filtered.exit_code is not None:
                        exited.set()
                    if data and sink is not None:
                        await sink.write(data)
                    if filtered.exit_code is not None:
                        break  # the command ended; what it wrote came before, in order
                elif event.payload_type == PayloadType.EXIT_CODE:
                    exit_code = _exit_code(event.payload)
            tail = filtered.flush()
            if tail and io.stdout is not None:
                await io.stdout.write(tail)
            for feeder in feeders:
                feeder.cancel()
    except* ProviderError as errors:
        raise errors.exceptions[0] from None
    if filtered.exit_code is not None:
        return filtered.exit_code
    if exit_code is not None:
        return exit_code
    if channel.closed_output:
        raise ProviderError(f"{NO_EXIT_CODE}; Session Manager said: {channel.closed_output}")
    raise ProviderError(NO_EXIT_CODE, reason="ExitCodeUnknown")


def _exit_code(payload: bytes) -> int | None:
    """An agent's exit-code message (payload type 12). The reference client names the
    type but never reads it, so its layout is not documented there; ECS's interactive
    sessions do not send it. Read as 4 big-endian bytes or decimal text; else unknown."""
    if len(payload) == 4:
        return int.from_bytes(payload, "big", signed=True)
    try:
        return int(payload.strip())
    except ValueError:
        return None


def exec_disabled() -> UnsupportedError:
    return UnsupportedError(
        "kubectl exec on fargate pods uses ECS Exec, which this node has off: set "
        "`enable_execute_command: true` in the fargate provider config (and give the task "
        "role the ssmmessages permissions); pods started before must be re-created",
        reason="ExecNotEnabled",
    )


__all__ = ["Exec", "SessionEnded", "exec_disabled"]
