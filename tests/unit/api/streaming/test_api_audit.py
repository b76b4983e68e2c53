"""The audit trail of exec, attach and port-forward (vkpy.audit) through the real server:
one record per session, naming who, what (argv, never stdin or environment), where
and how it ended; refusals are recorded too.
"""

from __future__ import annotations

import asyncio
import json
import logging
from typing import Any

import aiohttp
import pytest

from tests.unit.api.streaming.test_api_streams import query
from tests.unit.api.test_api_server import StartApi, start_api  # noqa: F401
from tests.unit.streams_server import StreamsProvider

V5 = "v5.channel.k8s.io"
SECRET = "stdin-secret-7f3a"


def audits(caplog: pytest.LogCaptureFixture) -> list[dict[str, Any]]:
    return [
        {**r.__dict__, "message": r.getMessage()} for r in caplog.records if r.name == "vkpy.audit"
    ]


async def run_ws(api: Any, path: str, send: list[bytes]) -> None:
    async with api.session.ws_connect(api.url + path, protocols=[V5], ssl=False) as ws:
        for message in send:
            await ws.send_bytes(message)
        async for _ in ws:
            pass


async def test_exec_attach_and_port_forward_are_audited_once_each(
    start_api: StartApi,  # noqa: F811
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO, logger="vkpy.audit")
    api = await start_api(StreamsProvider())
    await run_ws(
        api,
        "/exec/ns/web/app" + query("sh", "-c", "cat; exit 3", stdin=True),
        [b"\x00" + SECRET.encode() + b"\n", b"\xff\x00"],
    )
    await run_ws(api, "/attach/ns/web/uid-web/app?input=1&output=1", [b"\x00hi", b"\xff\x00"])
    async with api.session.ws_connect(
        api.url + "/portForward/ns/web?port=8080",
        protocols=["v4.channel.k8s.io"],
        ssl=False,
    ) as ws:
        await ws.close()
    for _ in range(100):  # the server ends the session after the client's close
        if len(audits(caplog)) == 3:
            break
        await asyncio.sleep(0.05)
    records = audits(caplog)
    assert [r["verb"] for r in records] == ["exec", "attach", "portforward"]
    exec_record, attach_record, forward_record = records
    assert exec_record["user"] == "system:anonymous"
    assert json.loads(exec_record["groups"]) == ["system:unauthenticated"]
    assert json.loads(exec_record["command"]) == ["sh", "-c", "cat; exit 3"]
    assert (exec_record["namespace"], exec_record["pod"], exec_record["container"]) == (
        "ns",
        "web",
        "app",
    )
    assert (exec_record["status"], exec_record["outcome"], exec_record["exit_code"]) == (
        101,
        "exit_code",
        3,
    )
    assert exec_record["stdin"] is True and exec_record["tty"] is False
    assert attach_record["uid"] == "uid-web" and "command" not in attach_record
    assert forward_record["ports"] == "8080"
    for record in records:
        assert SECRET not in json.dumps(record, default=str)
        assert "GREETING" not in json.dumps(record, default=str)  # the pod's environment


async def test_refused_sessions_are_audited_with_their_status(
    start_api: StartApi,  # noqa: F811
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO, logger="vkpy.audit")
    api = await start_api(StreamsProvider())
    async with api.session.post(api.url + "/exec/ns/nope/app" + query("id"), ssl=False) as r:
        assert r.status == 404
    async with api.session.post(api.url + "/exec/ns/web/app?output=1", ssl=False) as r:
        assert r.status == 400
    (missing, no_command) = audits(caplog)
    assert (missing["status"], missing["outcome"], missing["pod"]) == (404, "refused", "nope")
    assert json.loads(missing["command"]) == ["id"]
    assert (no_command["status"], no_command["outcome"]) == (400, "refused")
    assert json.loads(no_command["command"]) == []


async def test_unauthenticated_attempts_are_audited_without_a_user(
    start_api: StartApi,  # noqa: F811
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO, logger="vkpy.audit")
    api = await start_api(StreamsProvider(), anonymous_auth=False)
    with pytest.raises(aiohttp.WSServerHandshakeError):
        await run_ws(api, "/exec/ns/web/app" + query("id"), [])
    (record,) = audits(caplog)
    assert (record["status"], record["outcome"]) == (401, "refused")
    assert "user" not in record
