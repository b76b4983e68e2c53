"""/exec and /attach over SPDY/3.1, driven frame by frame by a raw SPDY client.

What kubectl (through the API server) relies on, checked at the frame level: the
upgrade and protocol negotiation, answers before the upgrade (400/403/404), the
stream order and the Status on the error stream, FIN before the Status, GOAWAY and
the close, stdin with back-pressure, resize, ping echo, no frame before the client's
first SYN_STREAM, the stream creation and idle timeouts, and a client that goes away
(the command is cancelled, nothing is left running). The same through kubectl and the
real API server is in tests/integration/test_exec*.py.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import os
from typing import Any
from urllib.parse import urlencode

import pytest

from tests.stream_clients import SpdyClient
from tests.unit.streams_server import (
    BareProvider,
    StartServer,
    StreamsProvider,
    StreamsServer,
)
from vkpy.api.streaming.shared import SESSIONS
from vkpy.streams.channels import encode_resize
from vkpy.streams.spdy import DataReceived, GoAwayReceived, PingReceived

V4 = "v4.channel.k8s.io"
EXEC = "/exec/ns/web/app"


def query(
    *command: str, stdin: bool = False, stdout: bool = True, stderr: bool = True, tty: bool = False
) -> str:
    params = [("command", c) for c in command]
    params += [("input", "1" if stdin else "0"), ("output", "1" if stdout else "0")]
    params += [("error", "1" if stderr else "0"), ("tty", "1" if tty else "0")]
    return "?" + urlencode(params)


async def connect(server: StreamsServer, path: str, **kwargs: Any) -> SpdyClient:
    client, answer = await SpdyClient.connect(
        "127.0.0.1", server.port, path, ssl_context=server.client_ssl, **kwargs
    )
    assert client is not None, (answer.status, answer.body)
    return client


async def open_streams(
    client: SpdyClient, *, stdin: bool = False, stderr: bool = True, tty: bool = False
) -> dict[str, int]:
    ids = {"error": client.open({"streamtype": "error"})}
    if stdin:
        ids["stdin"] = client.open({"streamtype": "stdin"})
    ids["stdout"] = client.open({"streamtype": "stdout"})
    if stderr and not tty:
        ids["stderr"] = client.open({"streamtype": "stderr"})
    if tty:
        ids["resize"] = client.open({"streamtype": "resize"})
    return ids


def status(raw: bytes) -> dict[str, Any]:
    decoded: dict[str, Any] = json.loads(raw)
    return decoded


async def settled(provider: StreamsProvider, baseline: int, timeout: float = 5.0) -> None:
    """The backend ran to its end and no task is left over (the server's own excepted)."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while loop.time() < deadline:
        if provider.running == 0 and len(asyncio.all_tasks()) <= baseline:
            return
        await asyncio.sleep(0.02)
    names = sorted(t.get_name() for t in asyncio.all_tasks())
    raise AssertionError(f"running={provider.running}, tasks left: {names}")


async def test_exec_writes_stdout_then_the_status_then_goes_away(start: StartServer) -> None:
    provider = StreamsProvider()
    server = await start(provider)
    baseline = len(asyncio.all_tasks())
    client = await connect(server, EXEC + query("sh", "-c", "echo hi; echo oops >&2"))
    ids = await open_streams(client)
    assert await client.wait_stream(ids["stdout"]) == b"hi\n"
    assert await client.wait_stream(ids["stderr"]) == b"oops\n"
    assert status(await client.wait_stream(ids["error"])) == {"metadata": {}, "status": "Success"}
    await client.wait_goaway()
    assert client.goaway is not None and client.goaway.status == 0
    data = [e for e in client.events if isinstance(e, DataReceived)]
    fins = [e.stream_id for e in data if e.fin]
    assert fins.index(ids["error"]) == len(fins) - 1, "stdout and stderr end before the status"
    assert all(s.replied for s in client.streams.values())
    await client.close()
    await settled(provider, baseline)
    assert SESSIONS.labels("exec", "spdy")._value.get() == 0


async def test_non_zero_exit_code_is_reported(start: StartServer) -> None:
    server = await start()
    client = await connect(server, EXEC + query("sh", "-c", "exit 7"))
    ids = await open_streams(client)
    got = status(await client.wait_stream(ids["error"]))
    assert got == {
        "metadata": {},
        "status": "Failure",
        "message": "command terminated with non-zero exit code: 7",
        "reason": "NonZeroExitCode",
        "details": {"causes": [{"reason": "ExitCode", "message": "7"}]},
    }
    await client.close()


async def test_version_1_reports_failure_as_text_and_success_as_nothing(start: StartServer) -> None:
    server = await start()
    client = await connect(server, EXEC + query("false"), protocols=["channel.k8s.io"])
    ids = await open_streams(client)
    assert (
        await client.wait_stream(ids["error"]) == b"command terminated with non-zero exit code: 1"
    )
    await client.close()
    client = await connect(server, EXEC + query("true"), protocols=["channel.k8s.io"])
    ids = await open_streams(client)
    assert await client.wait_stream(ids["error"]) == b""
    await client.close()


async def test_negotiation_picks_the_clients_first_supported_version(start: StartServer) -> None:
    server = await start()
    client, answer = await SpdyClient.connect(
        "127.0.0.1",
        server.port,
        EXEC + query("true"),
        protocols=["v9.channel.k8s.io", "v4.channel.k8s.io", "v5.channel.k8s.io"],
        ssl_context=server.client_ssl,
    )
    assert client is not None
    assert answer.header("X-Stream-Protocol-Version") == "v4.channel.k8s.io"
    assert answer.header("Upgrade") == "SPDY/3.1"
    await client.close()


@pytest.mark.parametrize(
    ("path", "kwargs", "code", "text"),
    [
        (EXEC + query("true"), {"protocols": ["v9.channel.k8s.io"]}, 403, "unable to negotiate"),
        (EXEC + query("true"), {"protocols": []}, 400, "X-Stream-Protocol-Version is required"),
        (EXEC + query("true"), {"upgrade": None}, 400, "missing upgrade headers"),
        ("/exec/ns/nope/app" + query("true"), {}, 404, "pod does not exist"),
        ("/exec/ns/web/other-uid/app" + query("true"), {}, 404, "pod does not exist"),
        ("/exec/ns/web/sidecar" + query("true"), {}, 404, "container not found"),
        (EXEC + query("true", stdout=False, stderr=False), {}, 400, "at least 1 of stdin"),
        (EXEC + "?output=1", {}, 400, "you must specify a command"),
    ],
)
async def test_refusals_before_the_upgrade(
    start: StartServer, path: str, kwargs: dict[str, Any], code: int, text: str
) -> None:
    server = await start()
    client, answer = await SpdyClient.connect(
        "127.0.0.1", server.port, path, ssl_context=server.client_ssl, **kwargs
    )
    assert client is None
    assert answer.status == code
    assert text in answer.body.decode()
    if code == 403:
        assert answer.header_values("X-Accepted-Stream-Protocol-Versions") == [
            "v5.channel.k8s.io",
            "v4.channel.k8s.io",
            "v3.channel.k8s.io",
            "v2.channel.k8s.io",
            "channel.k8s.io",
        ]


@pytest.mark.parametrize(
    ("command", "text"),
    [
        ([""], "invalid command: the executable name is empty"),
        (["", "-c", "true"], "invalid command: the executable name is empty"),
        (["sh\x00", "-c"], "invalid command: argument 1 contains a NUL byte"),
        (["sh", "-c", "echo\x00hi"], "invalid command: argument 3 contains a NUL byte"),
    ],
)
async def test_unusable_commands_are_refused_cleanly(
    start: StartServer, command: list[str], text: str
) -> None:
    provider = StreamsProvider()
    server = await start(provider)
    client, answer = await SpdyClient.connect(
        "127.0.0.1", server.port, EXEC + query(*command), ssl_context=server.client_ssl
    )
    assert client is None
    assert (answer.status, answer.body.decode()) == (400, text)
    assert provider.commands == []


async def test_unexpected_backend_failures_do_not_show_internals(start: StartServer) -> None:
    server = await start(StreamsProvider())
    client = await connect(server, EXEC + query("explode"))
    ids = await open_streams(client)
    got = status(await client.wait_stream(ids["error"]))
    assert (got["reason"], got["code"]) == ("InternalError", 500)
    assert got["message"] == "Internal error occurred: error executing command in container"
    assert "RuntimeError" not in json.dumps(got) and "/" not in got["message"]
    await client.close()


async def test_pod_uid_path_and_get_method(start: StartServer) -> None:
    server = await start()
    client = await connect(server, "/exec/ns/web/uid-web/app" + query("echo", "uid"), method="GET")
    ids = await open_streams(client)
    assert await client.wait_stream(ids["stdout"]) == b"uid\n"
    await client.close()


async def test_stdin_is_streamed_with_back_pressure(start: StartServer) -> None:
    provider = StreamsProvider()
    server = await start(provider, max_buffered=64 * 1024)
    payload = os.urandom(3 * 1024 * 1024 + 17)
    client = await connect(server, EXEC + query("cat", stdin=True))
    ids = await open_streams(client, stdin=True)
    await client.send(ids["stdin"], payload, fin=True)
    echoed = await client.wait_stream(ids["stdout"], timeout=30)
    assert hashlib.sha256(echoed).hexdigest() == hashlib.sha256(payload).hexdigest()
    assert status(await client.wait_stream(ids["error"]))["status"] == "Success"
    await client.close()


async def test_tty_resize_reaches_the_command(start: StartServer) -> None:
    server = await start()
    client = await connect(server, EXEC + query("sh", stdin=True, tty=True))
    ids = await open_streams(client, stdin=True, tty=True)
    assert await client.wait_data(ids["stdout"], 2) == b"$ "
    await client.send(ids["resize"], encode_resize(120, 40))
    await client.send(ids["stdin"], b"stty size\r")
    out = await client.wait_data(ids["stdout"], len(b"$ stty size\r\n40 120\r\n$ "))
    assert out == b"$ stty size\r\n40 120\r\n$ "
    await client.send(ids["resize"], encode_resize(100, 30) + encode_resize(90, 20))
    await client.send(ids["stdin"], b"stty size\rexit 3\r")
    out = await client.wait_stream(ids["stdout"])
    assert out.endswith(b"stty size\r\n20 90\r\n$ exit 3\r\n")
    assert "non-zero exit code: 3" in status(await client.wait_stream(ids["error"]))["message"]
    await client.close()


async def test_no_frame_before_the_first_stream_and_pings_are_echoed(start: StartServer) -> None:
    server = await start()
    client = await connect(server, EXEC + query("echo", "late"))
    await asyncio.sleep(0.3)
    assert client.bytes_received == 0
    ping_id = client.ping()
    await asyncio.sleep(0.2)
    assert [e.ping_id for e in client.events if isinstance(e, PingReceived)] == []
    assert client.pongs == [ping_id]  # our own ping came back unchanged
    ids = await open_streams(client)
    assert await client.wait_stream(ids["stdout"]) == b"late\n"
    await client.close()


async def test_streams_that_never_come_time_out(start: StartServer) -> None:
    provider = StreamsProvider()
    server = await start(provider, stream_creation_timeout=0.3)
    client = await connect(server, EXEC + query("echo", "never", stdin=True))
    error = client.open({"streamtype": "error"})
    client.open({"streamtype": "stdout"})  # no stdin, no stderr
    got = status(await client.wait_stream(error))
    assert got["reason"] == "InternalError"
    assert "timed out waiting for client to create streams" in got["message"]
    await client.wait_goaway()
    assert provider.commands == []
    await client.close()


async def test_idle_connection_is_closed_and_the_command_ends(start: StartServer) -> None:
    provider = StreamsProvider()
    server = await start(provider, idle_timeout=0.5)
    baseline = len(asyncio.all_tasks())
    client = await connect(server, EXEC + query("sleep", "infinity"))
    await open_streams(client)
    await client.wait_closed(timeout=10)
    assert isinstance(client.events[-1], GoAwayReceived)
    assert provider.cancelled == ["sleep infinity"]
    await client.close()
    await settled(provider, baseline)


@pytest.mark.parametrize("how", ["close", "abort"])
async def test_client_going_away_ends_the_command(start: StartServer, how: str) -> None:
    provider = StreamsProvider()
    server = await start(provider)
    baseline = len(asyncio.all_tasks())
    client = await connect(server, EXEC + query("cat", stdin=True))
    ids = await open_streams(client, stdin=True)
    await client.send(ids["stdin"], b"partial input")
    assert await client.wait_data(ids["stdout"], 13) == b"partial input"
    if how == "abort":
        client.abort()
    await client.close()
    await settled(provider, baseline)
    assert provider.cancelled == ["cat"]
    assert SESSIONS.labels("exec", "spdy")._value.get() == 0


async def test_backend_errors_and_missing_hooks_go_on_the_error_stream(start: StartServer) -> None:
    server = await start()
    client = await connect(server, EXEC + query("missing"))
    ids = await open_streams(client)
    got = status(await client.wait_stream(ids["error"]))
    assert (got["reason"], got["code"]) == ("InternalError", 500)
    assert got["message"] == 'Internal error occurred: container "app" is not running'
    await client.close()

    bare = await start(BareProvider())
    for kind, path in (
        ("exec", EXEC + query("true", stderr=False)),
        ("attach", "/attach/ns/web/app?output=1"),
    ):
        client = await connect(bare, path)
        ids = await open_streams(client, stderr=False)
        got = status(await client.wait_stream(ids["error"]))
        assert (
            got["message"] == f"Internal error occurred: the bare backend does not support {kind}"
        )
        await client.close()


async def test_attach_echoes_until_stdin_ends(start: StartServer) -> None:
    provider = StreamsProvider()
    server = await start(provider)
    client = await connect(server, "/attach/ns/web/app?input=1&output=1&error=1")
    ids = await open_streams(client, stdin=True)
    await client.send(ids["stdin"], b"to the main process\n", fin=True)
    assert await client.wait_stream(ids["stdout"]) == b"to the main process\n"
    assert status(await client.wait_stream(ids["error"]))["status"] == "Success"
    await client.close()


async def test_twenty_concurrent_sessions(start: StartServer) -> None:
    provider = StreamsProvider()
    server = await start(provider)
    baseline = len(asyncio.all_tasks())

    async def one(i: int) -> bytes:
        client = await connect(server, EXEC + query("cat", stdin=True))
        ids = await open_streams(client, stdin=True)
        await client.send(ids["stdin"], f"session {i}\n".encode() * 1000, fin=True)
        out = await client.wait_stream(ids["stdout"], timeout=30)
        await client.close()
        return out

    results = await asyncio.gather(*(one(i) for i in range(20)))
    assert results == [f"session {i}\n".encode() * 1000 for i in range(20)]
    await settled(provider, baseline)


async def test_server_hangs_up_when_the_client_stays_after_goaway(start: StartServer) -> None:
    server = await start(close_grace=0.3)
    client = await connect(server, EXEC + query("true"))
    ids = await open_streams(client)
    await client.wait_stream(ids["error"])
    await client.wait_goaway()
    await client.wait_closed(timeout=5)  # the client never hung up; the server did
    await client.close()
