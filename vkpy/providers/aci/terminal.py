"""`kubectl exec` and `kubectl attach` through ACI's WebSocket terminals.

ACI's exec API (POST .../containers/{name}/exec) starts one process in the
container and answers a WebSocket URI and a password; the client connects, sends
the password first, then the process's input as messages, and receives its output
until the socket closes. ACI documents what it cannot do, and the user is told so:
the command is a single executable without arguments (so `kubectl exec pod -- ls
-l` is refused with that explanation; `kubectl exec -it pod -- sh` works), it always
runs under a terminal whose size is fixed when it starts (later resizes are
ignored; the first size kubectl sends is used), stdout and stderr are one stream,
and no exit code comes back (a command that ran is reported as 0). Attach (POST
.../attach) streams the container's output from now on; ACI takes no input there.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import ssl
from collections.abc import Sequence

import aiohttp
from azure.mgmt.containerinstance import models as m

from vkpy.providers.aci.clients import AzureClients, provider_error
from vkpy.providers.aci.config import AciConfig
from vkpy.providers.base import StreamIO, TerminalSize
from vkpy.providers.errors import UnsupportedError

log = logging.getLogger(__name__)
FIRST_SIZE_WAIT = 5.0
"""How long exec -it waits for kubectl's terminal size before starting the command."""
ARGUMENTS_UNSUPPORTED = (
    "ACI's exec runs a single command without arguments ({command!r} has {count}); "
    "start a shell with `kubectl exec -it <pod> -- /bin/sh` and run it there"
)


def _ssl(config: AciConfig) -> ssl.SSLContext:
    context = ssl.create_default_context()
    if config.ca_bundle:
        context.load_verify_locations(config.ca_bundle)
    return context


async def _first_size(io: StreamIO) -> TerminalSize | None:
    if not io.tty or io.resize is None:
        return None
    with contextlib.suppress(TimeoutError, StopAsyncIteration):
        async with asyncio.timeout(FIRST_SIZE_WAIT):
            return await anext(io.resize)
    return None


async def _ignore_resizes(io: StreamIO) -> None:
    if io.resize is None:
        return
    warned = False
    async for _ in io.resize:
        if not warned:
            log.info("ACI cannot resize an exec terminal after it started; ignored")
            warned = True


async def _pump_in(ws: aiohttp.ClientWebSocketResponse, io: StreamIO) -> None:
    if io.stdin is None:
        return
    while data := await io.stdin.read():
        await ws.send_str(data.decode(errors="replace"))


async def _pump_out(ws: aiohttp.ClientWebSocketResponse, io: StreamIO) -> None:
    async for message in ws:
        if message.type == aiohttp.WSMsgType.BINARY:
            data = bytes(message.data)
        elif message.type == aiohttp.WSMsgType.TEXT:
            data = str(message.data).encode()
        else:
            break
        if not io.tty:
            data = data.replace(b"\r\n", b"\n")
        if io.stdout is not None:
            await io.stdout.write(data)


async def _session(config: AciConfig, uri: str, password: str, io: StreamIO, stdin: bool) -> None:
    connector = aiohttp.TCPConnector(ssl=_ssl(config))
    async with (
        aiohttp.ClientSession(connector=connector) as session,
        session.ws_connect(uri, heartbeat=30) as ws,
    ):
        await ws.send_str(password)
        async with asyncio.TaskGroup() as tasks:
            out = tasks.create_task(_pump_out(ws, io))
            side = [tasks.create_task(_ignore_resizes(io))]
            if stdin:
                side.append(tasks.create_task(_pump_in(ws, io)))
            await out
            for task in side:
                task.cancel()


async def exec_command(
    clients: AzureClients,
    config: AciConfig,
    group: str,
    container: str,
    command: Sequence[str],
    io: StreamIO,
) -> int:
    if len(command) != 1:
        raise UnsupportedError(
            ARGUMENTS_UNSUPPORTED.format(command=" ".join(command), count=len(command) - 1)
            if command
            else "no command given",
            reason="ExecUnsupported",
        )
    size = await _first_size(io)
    request = m.ContainerExecRequest(
        command=command[0],
        terminal_size=m.ContainerExecRequestTerminalSize(
            rows=size.height if size else 24, cols=size.width if size else 80
        ),
    )
    try:
        answer = await clients.aci.containers.execute_command(
            config.resource_group, group, container, request
        )
    except Exception as error:
        raise provider_error(error, f"exec in {group}/{container}") from error
    await _session(config, str(answer.web_socket_uri), str(answer.password), io, stdin=True)
    return 0


async def attach(
    clients: AzureClients, config: AciConfig, group: str, container: str, io: StreamIO
) -> int | None:
    try:
        answer = await clients.aci.containers.attach(config.resource_group, group, container)
    except Exception as error:
        raise provider_error(error, f"attach to {group}/{container}") from error
    await _session(config, str(answer.web_socket_uri), str(answer.password), io, stdin=False)
    return None
