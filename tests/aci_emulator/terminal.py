"""The emulator's exec and attach WebSockets, as ACI serves them.

ACI answers an exec or attach request with a WebSocket URI and a password; the
client connects, sends the password as its first message, and then: for exec, the
command runs under a terminal of the size given in the request (ACI has no resize)
with the client's text messages as its input and its output sent back, until it
exits and the socket closes (no exit code is sent: ACI has no way to); for attach,
the container's output from then on is sent until the container stops. Here the
command runs as a local process in the container's working directory and
environment.
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import os
import pty
import secrets
import struct
import termios
from dataclasses import dataclass

from aiohttp import WSMsgType, web

from tests.aci_emulator.runtime import Container


@dataclass
class Session:
    kind: str
    container: Container
    password: str
    command: str = ""
    rows: int = 24
    cols: int = 80


class Terminals:
    def __init__(self) -> None:
        self.sessions: dict[str, Session] = {}

    def open(self, session: Session) -> str:
        key = secrets.token_urlsafe(12)
        self.sessions[key] = session
        return key

    async def handle(self, request: web.Request) -> web.StreamResponse:
        session = self.sessions.pop(request.match_info["key"], None)
        if session is None:
            raise web.HTTPNotFound()
        ws = web.WebSocketResponse()
        await ws.prepare(request)
        first = await ws.receive()
        if first.type != WSMsgType.TEXT or first.data != session.password:
            await ws.close(code=4001, message=b"unauthorized")
            return ws
        if session.kind == "attach":
            await _attach(ws, session.container)
        else:
            await _exec(ws, session)
        return ws


async def _attach(ws: web.WebSocketResponse, container: Container) -> None:
    queue: asyncio.Queue[bytes | None] = asyncio.Queue()
    container.listeners.append(queue)
    try:
        while (data := await queue.get()) is not None:
            await ws.send_bytes(data)
    finally:
        container.listeners.remove(queue)
        await ws.close()


async def _exec(ws: web.WebSocketResponse, session: Session) -> None:
    master, slave = pty.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", session.rows, session.cols, 0, 0))
    container = session.container
    try:
        process = await asyncio.create_subprocess_exec(
            session.command,
            stdin=slave,
            stdout=slave,
            stderr=slave,
            cwd=container.workdir,
            env={**container.environment(), "TERM": "xterm"},
            start_new_session=True,
        )
    except OSError:
        os.close(slave)
        os.close(master)
        await ws.send_bytes(
            f"OCI runtime exec failed: exec failed: unable to start container process: exec: "
            f'"{session.command}": executable file not found in $PATH: unknown\r\n'.encode()
        )
        await ws.close()
        return
    os.close(slave)
    loop = asyncio.get_running_loop()
    output: asyncio.Queue[bytes] = asyncio.Queue()

    def readable() -> None:
        try:
            data = os.read(master, 65536)
        except OSError:
            data = b""
        if not data:
            loop.remove_reader(master)
        output.put_nowait(data)

    loop.add_reader(master, readable)

    async def pump_out() -> None:
        while data := await output.get():
            await ws.send_bytes(data)

    async def pump_in() -> None:
        async for message in ws:
            if message.type == WSMsgType.TEXT:
                os.write(master, message.data.encode())
            elif message.type == WSMsgType.BINARY:
                os.write(master, message.data)

    out_task = asyncio.create_task(pump_out())
    in_task = asyncio.create_task(pump_in())
    try:
        await process.wait()
        with contextlib.suppress(asyncio.TimeoutError):
            await asyncio.wait_for(asyncio.shield(out_task), 2)
    finally:
        in_task.cancel()
        out_task.cancel()
        loop.remove_reader(master)
        os.close(master)
        if process.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, 9)
        await ws.close()
