"""A strict local stand-in for ECS Exec: `ExecuteCommand` and the Session Manager side.

moto 5.2.5 has no ECS `ExecuteCommand` (and no Session Manager data channel), so the
tests answer it here, behind the same `AwsProxy` that fronts moto:

- `ecs:ExecuteCommand` is answered as ECS answers it: only `interactive: true`;
  `TargetNotConnectedException` for a task that RunTask started without
  `enableExecuteCommand` (the proxy shows this endpoint every RunTask); the task and
  container must exist in moto and the task must be RUNNING; `AccessDeniedException`
  when the test takes the permission away. It returns a session: an id, a token and
  a `ws://127.0.0.1` stream URL.
- `ssm:ResumeSession` hands out a fresh token (the old one stops working), or none
  once the session expired; `ssm:TerminateSession` ends it.
- The data channel speaks the protocol of the reference client
  (github.com/aws/session-manager-plugin) with `vkpy.streams.ssm_channel`, and refuses
  what the service refuses: an open message with a wrong or stale token (the
  WebSocket is closed, code 1008), a message whose payload digest is wrong (dropped,
  not acknowledged), a sequence number outside the window (closed, 1008). It sends
  the handshake, then runs the session's command as a real program on a
  pseudo-terminal of this host (the stand-in for the task's container, as ECS
  Exec's interactive sessions run it), applies Size messages to that terminal, resends
  output until acknowledged, and sends `channel_closed` once the program ended and
  all its output is acknowledged.

Faults on cue: corrupt the digest of the next output message, lose the next input
message, drop the connection after the n-th input message, expire sessions.
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import json
import os
import secrets
import shlex
import struct
import subprocess
import termios
import threading
import time
import urllib.request
import uuid
from collections.abc import Coroutine
from dataclasses import dataclass, field
from typing import Any

from aiohttp import WSMsgType, web

from tests.integration.moto_server import ACCOUNT, REGION, Call
from vkpy.streams import ssm_channel
from vkpy.streams.ssm_channel import ChannelEndpoint, PayloadType

ECS_TARGET = "AmazonEC2ContainerServiceV20141113."
SSM_TARGET = "AmazonSSM."
AGENT_VERSION = "3.3.1957.0"
NOT_CONNECTED = (
    "The execute command failed because execute command was not enabled when the task "
    "was run or the execute command agent isn't running. Wait and try again or run a new "
    "task with execute command enabled and try again."
)

Answer = tuple[int, list[tuple[str, str]], bytes]


def _error(code: str, message: str, status: int = 400) -> Answer:
    body = json.dumps({"__type": code, "message": message}).encode()
    headers = [("x-amzn-ErrorType", code), ("Content-Type", "application/x-amz-json-1.1")]
    return status, headers, body


def _ok(document: dict[str, Any]) -> Answer:
    return 200, [("Content-Type", "application/x-amz-json-1.1")], json.dumps(document).encode()


@dataclass
class ExecSession:
    """One session: its command, token, channel state and program."""

    session_id: str
    task_arn: str
    container: str
    command: str
    token: str
    state: ChannelEndpoint
    expired: bool = False
    ended: bool = False
    ws: web.WebSocketResponse | None = None
    process: subprocess.Popen[bytes] | None = None
    master: int | None = None
    handshake_done: bool = False
    pending_input: bytearray = field(default_factory=bytearray)
    sizes: list[tuple[int, int]] = field(default_factory=list)
    inputs: int = 0
    connections: int = 0
    output_done: bool = False
    most_unacknowledged: int = 0
    """The most output messages the client left unacknowledged at once."""


class SsmEndpoint:
    """ExecuteCommand, ResumeSession/TerminateSession and the data channel; see the module."""

    def __init__(self, moto_url: str) -> None:
        self.moto_url = moto_url
        self.sessions: dict[str, ExecSession] = {}
        self.exec_enabled: set[str] = set()
        self.denied = False
        """Answer ExecuteCommand with AccessDeniedException (the permission is missing)."""
        self.corrupt_next_output = False
        self.lose_next_input = False
        self.lost = 0
        self.drop_after_input: int | None = None
        """Drop the WebSocket (no close frame) once this many input messages arrived."""
        self.expire_on_drop = False
        """Expire the session when dropping it (ResumeSession then gives no token)."""
        self.refused_tokens = 0
        self.refused_digests = 0
        self.refused_windows = 0
        self.corrupted = 0
        self.drops = 0
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True)
        self._runner: web.AppRunner | None = None
        self._background: set[asyncio.Future[None]] = set()
        self.port = 0

    # --- lifecycle ------------------------------------------------------------------

    def start(self) -> SsmEndpoint:
        self._thread.start()
        asyncio.run_coroutine_threadsafe(self._serve(), self._loop).result(30)
        return self

    async def _serve(self) -> None:
        app = web.Application()
        app.router.add_get("/v1/data-channel/{session}", self._data_channel)
        self._runner = web.AppRunner(app)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        server = site._server
        assert server is not None and server.sockets  # type: ignore[attr-defined]
        self.port = server.sockets[0].getsockname()[1]  # type: ignore[attr-defined]

    def stop(self) -> None:
        async def shutdown() -> None:
            for session in list(self.sessions.values()):
                self._kill(session)
            if self._runner is not None:
                await self._runner.cleanup()

        with contextlib.suppress(Exception):
            asyncio.run_coroutine_threadsafe(shutdown(), self._loop).result(30)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)

    def session(self, index: int = -1) -> ExecSession:
        return list(self.sessions.values())[index]

    # --- the API calls (from the proxy's threads) --------------------------------------

    def observe(self, call: Call, document: dict[str, Any]) -> dict[str, Any] | None:
        """A proxy rewrite that only looks: which RunTask asked for ECS Exec."""
        if call.operation == ECS_TARGET + "RunTask":
            with contextlib.suppress(ValueError):
                if json.loads(call.body or b"{}").get("enableExecuteCommand") is True:
                    for task in document.get("tasks") or []:
                        self.exec_enabled.add(str(task.get("taskArn")))
        return None

    def intercept(self, call: Call) -> Answer | None:
        """Answers the calls moto does not have; None lets the proxy forward the call."""
        if call.operation == ECS_TARGET + "ExecuteCommand":
            return self._execute_command(json.loads(call.body or b"{}"))
        if call.operation == SSM_TARGET + "ResumeSession":
            return self._resume(json.loads(call.body or b"{}"))
        if call.operation == SSM_TARGET + "TerminateSession":
            return self._terminate(json.loads(call.body or b"{}"))
        return None

    def _moto_task(self, cluster: str, task: str) -> dict[str, Any] | None:
        request = urllib.request.Request(
            self.moto_url,
            data=json.dumps({"cluster": cluster, "tasks": [task]}).encode(),
            method="POST",
            headers={
                "X-Amz-Target": ECS_TARGET + "DescribeTasks",
                "Content-Type": "application/x-amz-json-1.1",
                "Authorization": (
                    f"AWS4-HMAC-SHA256 Credential=testing/20240101/{REGION}/ecs/aws4_request, "
                    "SignedHeaders=host, Signature=0"
                ),
            },
        )
        with urllib.request.urlopen(request, timeout=30) as answer:
            tasks = json.loads(answer.read()).get("tasks") or []
        return dict(tasks[0]) if tasks else None

    def _execute_command(self, body: dict[str, Any]) -> Answer:
        cluster = str(body.get("cluster") or "default")
        task_id = str(body.get("task") or "")
        if self.denied:
            return _error(
                "AccessDeniedException",
                f"User: arn:aws:sts::{ACCOUNT}:assumed-role/vkpy/node is not authorized to "
                f"perform: ecs:ExecuteCommand on resource: {task_id}",
            )
        if body.get("interactive") is not True:
            return _error(
                "InvalidParameterException", "Interactive is the only mode supported currently."
            )
        if not body.get("command"):
            return _error("InvalidParameterException", "command must be given")
        task = self._moto_task(cluster, task_id)
        if task is None:
            return _error("InvalidParameterException", "The specified task was not found.")
        if task.get("lastStatus") != "RUNNING" or task.get("desiredStatus") != "RUNNING":
            return _error(
                "InvalidParameterException",
                "The execute command failed because the task is not in the RUNNING state.",
            )
        arn = str(task["taskArn"])
        if arn not in self.exec_enabled:
            return _error("TargetNotConnectedException", NOT_CONNECTED)
        names = [str(c.get("name")) for c in task.get("containers") or []]
        container = str(body.get("container") or (names[0] if len(names) == 1 else ""))
        if container not in names:
            return _error(
                "InvalidParameterException", f"The container {container!r} was not found."
            )
        session_id = f"ecs-execute-command-{secrets.token_hex(8)}"
        session = ExecSession(
            session_id=session_id,
            task_arn=arn,
            container=container,
            command=str(body["command"]),
            token=secrets.token_urlsafe(32),
            state=ChannelEndpoint(
                sends=ssm_channel.OUTPUT_STREAM_DATA,
                clock_ms=lambda: int(time.time() * 1000),
                strict_window=True,
            ),
        )
        self.sessions[session_id] = session
        return _ok(
            {
                "clusterArn": str(task.get("clusterArn")),
                "containerArn": f"{arn}/{container}",
                "containerName": container,
                "interactive": True,
                "taskArn": arn,
                "session": {
                    "sessionId": session_id,
                    "streamUrl": self._stream_url(session_id),
                    "tokenValue": session.token,
                },
            }
        )

    def _stream_url(self, session_id: str) -> str:
        return f"ws://127.0.0.1:{self.port}/v1/data-channel/{session_id}?role=publish_subscribe"

    def _resume(self, body: dict[str, Any]) -> Answer:
        session = self.sessions.get(str(body.get("SessionId")))
        if session is None:
            return _error("DoesNotExistException", "Session not found")
        if session.expired or session.ended:
            return _ok({"SessionId": session.session_id})
        session.token = secrets.token_urlsafe(32)
        return _ok(
            {
                "SessionId": session.session_id,
                "TokenValue": session.token,
                "StreamUrl": self._stream_url(session.session_id),
            }
        )

    def _terminate(self, body: dict[str, Any]) -> Answer:
        session = self.sessions.get(str(body.get("SessionId")))
        if session is not None:
            session.ended = True
            self._loop.call_soon_threadsafe(self._kill, session)
        return _ok({"SessionId": str(body.get("SessionId"))})

    # --- the data channel -------------------------------------------------------------

    async def _data_channel(self, request: web.Request) -> web.WebSocketResponse:
        ws = web.WebSocketResponse(autoping=True)
        await ws.prepare(request)
        session = self.sessions.get(request.match_info["session"])
        try:
            opening = await ws.receive(timeout=10)
            token = None
            if opening.type == WSMsgType.TEXT:
                with contextlib.suppress(ValueError, AttributeError):
                    token = json.loads(opening.data).get("TokenValue")
        except TimeoutError:
            token = None
        if session is None or session.ended or session.expired or token != session.token:
            self.refused_tokens += 1
            await ws.close(code=1008, message=b"invalid or expired token")
            return ws
        session.token = secrets.token_urlsafe(32)  # a token opens the channel once
        previous, session.ws = session.ws, ws
        if previous is not None:
            await previous.close()
        session.connections += 1
        if session.connections == 1:
            self._send(session, PayloadType.HANDSHAKE_REQUEST, self._handshake_request(session))
        else:
            session.state.resend_all(time.monotonic())
        await self._flush(session)
        resender = asyncio.create_task(self._resend(session, ws))
        try:
            async for message in ws:
                if message.type != WSMsgType.BINARY:
                    continue
                if not await self._receive(session, ws, message.data):
                    break
        finally:
            resender.cancel()
        return ws

    def _handshake_request(self, session: ExecSession) -> bytes:
        return json.dumps(
            {
                "AgentVersion": AGENT_VERSION,
                "RequestedClientActions": [
                    {
                        "ActionType": "SessionType",
                        "ActionParameters": {
                            "SessionType": "InteractiveCommands",
                            "Properties": {"commands": session.command},
                        },
                    }
                ],
            }
        ).encode()

    def _send(self, session: ExecSession, payload_type: int, payload: bytes) -> None:
        data = session.state.send_stream(payload_type, payload, time.monotonic())
        session.most_unacknowledged = max(session.most_unacknowledged, session.state.unacknowledged)
        if self.corrupt_next_output and payload_type == PayloadType.OUTPUT:
            self.corrupt_next_output = False
            self.corrupted += 1
            bad = bytearray(data)
            bad[-1] ^= 0xFF  # the payload changes, the digest does not: the client must drop it
            session.state.outbox[-1] = bytes(bad)

    async def _flush(self, session: ExecSession) -> None:
        ws = session.ws
        for data in session.state.take_outbox():
            if ws is None or ws.closed:
                return
            with contextlib.suppress(ConnectionError, RuntimeError):
                await ws.send_bytes(data)

    async def _resend(self, session: ExecSession, ws: web.WebSocketResponse) -> None:
        while not ws.closed:
            await asyncio.sleep(0.05)
            session.state.due(time.monotonic())
            await self._flush(session)
            if session.output_done and session.state.unacknowledged == 0 and not session.ended:
                await self._close(session, "")

    async def _receive(self, session: ExecSession, ws: web.WebSocketResponse, data: bytes) -> bool:
        if self.lose_next_input and session.handshake_done:
            with contextlib.suppress(ssm_channel.ChannelError):
                message = ssm_channel.decode(data)
                if message.message_type == ssm_channel.INPUT_STREAM_DATA:
                    self.lose_next_input = False
                    self.lost += 1
                    return True  # as if it never arrived: no ack, the client must resend
        try:
            events = session.state.receive(data, time.monotonic())
        except ssm_channel.WindowError as error:
            self.refused_windows += 1
            self._kill(session)
            session.ended = True
            await ws.close(code=1008, message=str(error).encode()[:120])
            return False
        for event in events:
            if isinstance(event, ssm_channel.Refused):
                if "digest" in event.reason:
                    self.refused_digests += 1
            elif isinstance(event, ssm_channel.Delivered):
                self._input(session, event)
        await self._flush(session)
        if self.drop_after_input is not None and session.inputs >= self.drop_after_input:
            self.drop_after_input = None
            self.drops += 1
            if self.expire_on_drop:
                session.expired = True
                self._kill(session)
            session.ws = None
            transport = ws._req.transport if ws._req is not None else None
            if transport is not None:
                transport.abort()  # no close frame: the connection just goes away
            return False
        return True

    def _input(self, session: ExecSession, event: ssm_channel.Delivered) -> None:
        kind = event.payload_type
        if kind == PayloadType.HANDSHAKE_RESPONSE:
            response = json.loads(event.payload)
            actions = response.get("ProcessedClientActions") or []
            if not any(
                a.get("ActionType") == "SessionType" and a.get("ActionStatus") == 1 for a in actions
            ):
                self._later(self._close(session, "handshake failed"))
                return
            session.handshake_done = True
            complete = json.dumps({"HandshakeTimeToComplete": 1000000, "CustomerMessage": ""})
            self._send(session, PayloadType.HANDSHAKE_COMPLETE, complete.encode())
            self._spawn(session)
            return
        session.inputs += 1
        if kind == PayloadType.OUTPUT:
            session.pending_input += event.payload
            self._pump(session)
        elif kind == PayloadType.SIZE:
            size = json.loads(event.payload)
            cols, rows = int(size["cols"]), int(size["rows"])
            session.sizes.append((cols, rows))
            if session.master is not None:
                winsize = struct.pack("HHHH", rows, cols, 0, 0)
                fcntl.ioctl(session.master, termios.TIOCSWINSZ, winsize)
        elif (
            kind == PayloadType.FLAG
            and int.from_bytes(event.payload, "big") == ssm_channel.Flag.TERMINATE_SESSION
        ):
            self._kill(session)

    # --- the program ----------------------------------------------------------------

    def _spawn(self, session: ExecSession) -> None:
        master, slave = os.openpty()
        cols, rows = session.sizes[-1] if session.sizes else (80, 24)
        fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", rows, cols, 0, 0))

        def controlling_terminal() -> None:
            fcntl.ioctl(0, termios.TIOCSCTTY, 0)

        env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "TERM": "xterm", "HOME": "/tmp"}
        try:
            session.process = subprocess.Popen(
                shlex.split(session.command),
                stdin=slave,
                stdout=slave,
                stderr=slave,
                start_new_session=True,
                preexec_fn=controlling_terminal,  # noqa: PLW1509 - the pty must be the ctty
                env=env,
                cwd="/tmp",
            )
        except OSError as error:
            os.close(slave)
            os.close(master)
            self._send(session, PayloadType.OUTPUT, f"{error}\r\n".encode())
            session.output_done = True
            return
        os.close(slave)
        os.set_blocking(master, False)
        session.master = master
        self._loop.add_reader(master, self._read_output, session)
        self._pump(session)

    def _read_output(self, session: ExecSession) -> None:
        assert session.master is not None
        try:
            data = os.read(session.master, ssm_channel.STREAM_PAYLOAD_SIZE)
        except BlockingIOError:
            return
        except OSError:
            data = b""
        if data:
            self._send(session, PayloadType.OUTPUT, data)
            self._later(self._flush(session))
            return
        self._loop.remove_reader(session.master)
        self._loop.remove_writer(session.master)
        if session.process is not None:
            with contextlib.suppress(subprocess.TimeoutExpired):
                session.process.wait(timeout=5)
        os.close(session.master)
        session.master = None
        session.output_done = True

    def _pump(self, session: ExecSession) -> None:
        master = session.master
        if master is None:
            return
        while session.pending_input:
            try:
                written = os.write(master, session.pending_input[:65536])
            except BlockingIOError:
                self._loop.add_writer(master, self._writable, session)
                return
            except OSError:
                session.pending_input.clear()
                return
            del session.pending_input[:written]
        self._loop.remove_writer(master)

    def _later(self, work: Coroutine[Any, Any, None]) -> None:
        task = asyncio.ensure_future(work)
        self._background.add(task)
        task.add_done_callback(self._background.discard)

    def _writable(self, session: ExecSession) -> None:
        self._pump(session)

    def _kill(self, session: ExecSession) -> None:
        process = session.process
        if process is not None and process.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, 9)

    async def _close(self, session: ExecSession, output: str) -> None:
        session.ended = True
        payload = ssm_channel.channel_closed_payload(
            session.session_id, output, time.strftime("%Y-%m-%dT%H:%M:%SZ"), str(uuid.uuid4())
        )
        session.state.outbox.append(session.state.message(ssm_channel.CHANNEL_CLOSED, 0, payload))
        await self._flush(session)
        if session.ws is not None:
            await session.ws.close()
