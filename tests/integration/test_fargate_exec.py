"""`kubectl exec` on Fargate through ECS Exec, at the backend: the fargate provider
against moto (tasks) and the strict local Session Manager endpoint (ExecuteCommand
and the data channel, running the session's command on a real pseudo-terminal).

Output, input, exit codes and terminal sizes are those of real programs; a bad
digest and a dropped connection are recovered as the reference client recovers
them; each refusal reaches the caller as an error a user can act on.
"""
# ruff: noqa: F811 - pytest fixtures are imported by name and then requested as arguments

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
import os
import secrets
from collections.abc import AsyncIterator, Iterator
from typing import Any

import aiohttp
import pytest

from tests.integration.aws_fixtures import (  # noqa: F401 - fixtures
    FargateSetup,
    aws,
    aws_proxy,
    fargate_setup,
    moto,
    ssm_endpoint,
)
from tests.integration.moto_server import Aws, AwsProxy, Call
from tests.integration.ssm_endpoint import SsmEndpoint
from tests.integration.test_aws_providers import Sink, pod
from vkpy.providers.base import PodRef, StreamIO, TerminalSize
from vkpy.providers.errors import ProviderError, UnsupportedError
from vkpy.providers.fargate import FargateConfig, FargateProvider
from vkpy.streams import ssm_channel


class Source:
    """stdin from a queue (b"" ends it)."""

    def __init__(self, *chunks: bytes) -> None:
        self.queue: asyncio.Queue[bytes] = asyncio.Queue()
        for chunk in chunks:
            self.queue.put_nowait(chunk)

    async def read(self) -> bytes:
        return await self.queue.get()


class Sizes:
    """Terminal sizes from a queue (None ends them)."""

    def __init__(self) -> None:
        self.queue: asyncio.Queue[TerminalSize | None] = asyncio.Queue()

    def __aiter__(self) -> Sizes:
        return self

    async def __anext__(self) -> TerminalSize:
        size = await self.queue.get()
        if size is None:
            raise StopAsyncIteration
        return size


@contextlib.asynccontextmanager
async def running_pod(
    setup: FargateSetup, **overrides: Any
) -> AsyncIterator[tuple[FargateProvider, PodRef]]:
    config = FargateConfig.from_dict(setup.config(enable_execute_command=True, **overrides))
    provider = FargateProvider(config, f"vk-x{secrets.token_hex(3)}")
    await provider.start()
    try:
        spec = pod(image="busybox:1.36", command=("sleep", "3600"))
        await provider.create_pod(spec)
        yield provider, spec.ref
    finally:
        await provider.close()


def chunks(data: bytes, size: int = 65536) -> Iterator[bytes]:
    for start in range(0, len(data), size):
        yield data[start : start + size]


async def test_exec_prints_output_and_exit_codes(
    fargate_setup: FargateSetup, ssm_endpoint: SsmEndpoint
) -> None:
    async with running_pod(fargate_setup) as (provider, ref):
        out = Sink()
        code = await provider.exec_in_container(
            ref, "app", ["echo", "hi"], StreamIO(stdin=None, stdout=out, stderr=Sink(), tty=False)
        )
        assert (code, out.data) == (0, b"hi\n")
        session = ssm_endpoint.session()
        assert session.connections == 1 and session.ended
        out = Sink()
        code = await provider.exec_in_container(
            ref,
            "app",
            ["sh", "-c", "echo to-stderr >&2; exit 7"],
            StreamIO(stdin=None, stdout=out, stderr=Sink(), tty=False),
        )
        assert code == 7
        assert out.data == b"to-stderr\n"  # one terminal: stderr arrives on stdout


async def test_exec_stdin_round_trips_5_mb(
    fargate_setup: FargateSetup, ssm_endpoint: SsmEndpoint
) -> None:
    payload = os.urandom(5 * 1024 * 1024)
    async with running_pod(fargate_setup) as (provider, ref):
        out = Sink()
        stdin = Source(*chunks(payload), b"")
        code = await provider.exec_in_container(
            ref, "app", ["sha256sum"], StreamIO(stdin=stdin, stdout=out, stderr=Sink(), tty=False)
        )
        assert code == 0
        assert out.data == f"{hashlib.sha256(payload).hexdigest()}  -\n".encode()


async def wait_for(sink: Sink, text: bytes, after: int = 0, timeout: float = 20) -> int:
    async with asyncio.timeout(timeout):
        while (at := sink.data.find(text, after)) < 0:
            await asyncio.sleep(0.02)
    return at + len(text)


async def test_exec_tty_shell_gets_a_prompt_and_sees_resizes(
    fargate_setup: FargateSetup, ssm_endpoint: SsmEndpoint
) -> None:
    async with running_pod(fargate_setup) as (provider, ref):
        out, stdin, sizes = Sink(), Source(), Sizes()
        sizes.queue.put_nowait(TerminalSize(100, 30))
        io = StreamIO(stdin=stdin, stdout=out, stderr=None, tty=True, resize=sizes)
        running = asyncio.create_task(provider.exec_in_container(ref, "app", ["sh"], io))
        seen = await wait_for(out, b"# ")  # the shell's prompt (root's)
        stdin.queue.put_nowait(b"stty size\n")
        seen = await wait_for(out, b"30 100\r\n", seen)
        sizes.queue.put_nowait(TerminalSize(132, 43))
        async with asyncio.timeout(10):
            while ssm_endpoint.session().sizes[-1:] != [(132, 43)]:
                await asyncio.sleep(0.02)
        stdin.queue.put_nowait(b"stty size\n")
        seen = await wait_for(out, b"43 132\r\n", seen)
        stdin.queue.put_nowait(b"exit 3\n")
        assert await asyncio.wait_for(running, 20) == 3
        assert b"\x1e" not in out.data  # the wrapper's markers never reach the user


async def test_a_bad_digest_is_dropped_and_the_resend_delivered(
    fargate_setup: FargateSetup, ssm_endpoint: SsmEndpoint
) -> None:
    async with running_pod(fargate_setup) as (provider, ref):
        ssm_endpoint.corrupt_next_output = True
        out = Sink()
        code = await provider.exec_in_container(
            ref,
            "app",
            ["echo", "intact"],
            StreamIO(stdin=None, stdout=out, stderr=None, tty=False),
        )
        assert ssm_endpoint.corrupted == 1
        assert (code, out.data) == (0, b"intact\n")  # neither lost nor doubled


async def test_a_dropped_connection_is_resumed_without_losing_input(
    fargate_setup: FargateSetup, ssm_endpoint: SsmEndpoint
) -> None:
    payload = os.urandom(1024 * 1024)
    async with running_pod(fargate_setup) as (provider, ref):
        ssm_endpoint.drop_after_input = 300
        out = Sink()
        code = await provider.exec_in_container(
            ref,
            "app",
            ["sha256sum"],
            StreamIO(stdin=Source(*chunks(payload), b""), stdout=out, stderr=None, tty=False),
        )
        assert ssm_endpoint.drops == 1
        assert ssm_endpoint.session().connections == 2  # ResumeSession, then a new channel
        assert (code, out.data) == (0, f"{hashlib.sha256(payload).hexdigest()}  -\n".encode())


async def test_an_expired_session_is_reported(
    fargate_setup: FargateSetup, ssm_endpoint: SsmEndpoint
) -> None:
    async with running_pod(fargate_setup) as (provider, ref):
        ssm_endpoint.drop_after_input = 5
        ssm_endpoint.expire_on_drop = True
        with pytest.raises(ProviderError, match="expired"):
            await provider.exec_in_container(
                ref,
                "app",
                ["cat"],
                StreamIO(stdin=Source(b"x" * 100_000), stdout=Sink(), stderr=None, tty=False),
            )


async def test_a_wrong_token_and_an_out_of_window_number_are_refused(
    fargate_setup: FargateSetup, ssm_endpoint: SsmEndpoint, aws: Aws
) -> None:
    """The endpoint itself, spoken to by hand: what the service refuses, it refuses."""
    async with running_pod(fargate_setup) as (provider, ref):
        tasks = await aws.acall("ecs", "list_tasks", cluster=fargate_setup.cluster)
        answer = ssm_endpoint.intercept(
            _call(
                "AmazonEC2ContainerServiceV20141113.ExecuteCommand",
                cluster=fargate_setup.cluster,
                task=tasks["taskArns"][0],
                container="app",
                command="cat",
                interactive=True,
            )
        )
        assert answer is not None and answer[0] == 200
        session = json.loads(answer[2])["session"]
        async with aiohttp.ClientSession() as http:
            async with http.ws_connect(session["streamUrl"]) as ws:
                await ws.send_str(ssm_channel.open_data_channel("wrong", "c", "r", "t"))
                closed = await ws.receive()
                assert closed.type == aiohttp.WSMsgType.CLOSE and closed.data == 1008
            async with http.ws_connect(session["streamUrl"]) as ws:
                await ws.send_str(
                    ssm_channel.open_data_channel(session["tokenValue"], "c", "r", "t")
                )
                first = ssm_channel.decode((await ws.receive()).data)
                assert first.payload_type == ssm_channel.PayloadType.HANDSHAKE_REQUEST
                side = ssm_channel.ChannelEndpoint(
                    sends=ssm_channel.INPUT_STREAM_DATA, clock_ms=lambda: 1
                )
                good = side.send_stream(1, b"typed", 0.0)
                bad = good[:-1] + b"T"  # the payload changed, its digest did not
                await ws.send_bytes(bad)
                assert await acknowledged(ws, 0.5) == []  # dropped: no acknowledgement
                await ws.send_bytes(good)
                assert await acknowledged(ws, 0.5) == [0]
                side.next_sequence = ssm_channel.WINDOW + 1  # beyond what the agent buffers
                await ws.send_bytes(side.send_stream(1, b"x", 0.0))
                while (message := await ws.receive()).type == aiohttp.WSMsgType.BINARY:
                    pass
                assert message.type == aiohttp.WSMsgType.CLOSE and message.data == 1008
        assert ssm_endpoint.refused_tokens == 1
        assert ssm_endpoint.refused_digests == 1
        assert ssm_endpoint.refused_windows == 1
        assert ref.uid and provider


async def acknowledged(ws: aiohttp.ClientWebSocketResponse, seconds: float) -> list[int]:
    """Sequence numbers the endpoint acknowledges within `seconds`."""
    found: list[int] = []
    with contextlib.suppress(TimeoutError):
        async with asyncio.timeout(seconds):
            while True:
                message = ssm_channel.decode((await ws.receive()).data)
                if message.message_type == ssm_channel.ACKNOWLEDGE:
                    found.append(json.loads(message.payload)["AcknowledgedMessageSequenceNumber"])
    return found


def _call(target: str, **body: Any) -> Call:
    return Call("POST", "/", target, json.dumps(body).encode())


async def test_exec_errors_a_user_can_act_on(
    fargate_setup: FargateSetup, ssm_endpoint: SsmEndpoint, aws: Aws, aws_proxy: AwsProxy
) -> None:
    # exec off in the node's config: said so, with the setting to change
    off = FargateProvider(FargateConfig.from_dict(fargate_setup.config()), "vk-off")
    await off.start()
    try:
        spec = pod(image="busybox:1.36", command=("sleep", "3600"))
        await off.create_pod(spec)
        io = StreamIO(stdin=None, stdout=Sink(), stderr=None, tty=False)
        with pytest.raises(UnsupportedError, match="enable_execute_command: true"):
            await off.exec_in_container(spec.ref, "app", ["true"], io)
        # the config turned on later: the task already running was launched without exec
        on = FargateProvider(
            FargateConfig.from_dict(fargate_setup.config(enable_execute_command=True)), "vk-off"
        )
        await on.start()
        try:
            await on.list_pods()
            with pytest.raises(ProviderError, match="started without ECS Exec"):
                await on.exec_in_container(spec.ref, "app", ["true"], io)
        finally:
            await on.close()
    finally:
        await off.close()

    async with running_pod(fargate_setup) as (provider, ref):
        io = StreamIO(stdin=None, stdout=Sink(), stderr=None, tty=False)
        ssm_endpoint.denied = True
        with pytest.raises(ProviderError, match="needs ecs:ExecuteCommand"):
            await provider.exec_in_container(ref, "app", ["true"], io)
        ssm_endpoint.denied = False
        tasks = await aws.acall("ecs", "list_tasks", cluster=fargate_setup.cluster)
        for arn in tasks["taskArns"]:
            await aws.acall("ecs", "stop_task", cluster=fargate_setup.cluster, task=arn)
        aws_proxy.rewrites.append(still_running_while_stopping)  # moto stops at once
        with pytest.raises(ProviderError, match="its ECS task is stopping"):
            await provider.exec_in_container(ref, "app", ["true"], io)
        aws_proxy.rewrites.remove(still_running_while_stopping)
        with pytest.raises(ProviderError, match="its ECS task is stopped"):
            await provider.exec_in_container(ref, "app", ["true"], io)


def still_running_while_stopping(call: Call, document: dict[str, Any]) -> dict[str, Any] | None:
    """DescribeTasks as ECS answers while a task stops: desired STOPPED, last RUNNING."""
    if not call.operation.endswith(".DescribeTasks"):
        return None
    for task in document.get("tasks") or []:
        if task.get("desiredStatus") == "STOPPED":
            task["lastStatus"] = "RUNNING"
    return document


async def test_no_exit_code_is_made_up(
    fargate_setup: FargateSetup, ssm_endpoint: SsmEndpoint
) -> None:
    """The wrapper killed before it reports: the channel carries no exit code, so the
    caller gets an error saying so, never 0."""
    async with running_pod(fargate_setup) as (provider, ref):
        out = Sink()
        io = StreamIO(stdin=None, stdout=out, stderr=None, tty=False)
        with pytest.raises(ProviderError, match="exit code is unknown"):
            await provider.exec_in_container(
                ref, "app", ["sh", "-c", "echo partial; kill -KILL $PPID"], io
            )
        assert out.data == b"partial\n"


async def test_a_client_going_away_ends_the_session_and_its_command(
    fargate_setup: FargateSetup, ssm_endpoint: SsmEndpoint
) -> None:
    async with running_pod(fargate_setup) as (provider, ref):
        out = Sink()
        io = StreamIO(stdin=None, stdout=out, stderr=None, tty=False)
        running = asyncio.create_task(
            provider.exec_in_container(ref, "app", ["sh", "-c", "echo started; sleep 600"], io)
        )
        await wait_for(out, b"started\n")
        running.cancel()
        with pytest.raises(asyncio.CancelledError):
            await running
        session = ssm_endpoint.session()
        assert session.ended  # TerminateSession
        async with asyncio.timeout(10):
            while session.process is None or session.process.poll() is None:
                await asyncio.sleep(0.05)


async def test_attach_says_what_ecs_exec_cannot_do(
    fargate_setup: FargateSetup, ssm_endpoint: SsmEndpoint
) -> None:
    async with running_pod(fargate_setup) as (provider, ref):
        io = StreamIO(stdin=None, stdout=Sink(), stderr=None, tty=False)
        with pytest.raises(UnsupportedError, match="cannot connect to the container's main"):
            await provider.attach_to_container(ref, "app", io)


async def test_exec_i_ends_with_the_command_while_stdin_stays_open(
    fargate_setup: FargateSetup, ssm_endpoint: SsmEndpoint
) -> None:
    """`kubectl exec -i pod -- echo hi` from a terminal: the command does not read
    stdin, so the exec ends when it does, not when stdin ends."""
    async with running_pod(fargate_setup) as (provider, ref):
        out = Sink()
        io = StreamIO(stdin=Source(b"typed\n"), stdout=out, stderr=None, tty=False)
        async with asyncio.timeout(15):
            code = await provider.exec_in_container(ref, "app", ["sh", "-c", "echo hi; exit 4"], io)
        assert (code, out.data) == (4, b"hi\n")
        session = ssm_endpoint.session()
        async with asyncio.timeout(10):  # TerminateSession ended the stdin decoder too
            while session.process is None or session.process.poll() is None:
                await asyncio.sleep(0.05)


class SlowSink(Sink):
    """A client reading slowly at first."""

    def __init__(self, slow_writes: int) -> None:
        super().__init__()
        self.slow_writes = slow_writes

    async def write(self, data: bytes) -> None:
        if self.slow_writes > 0:
            self.slow_writes -= 1
            await asyncio.sleep(0.005)
        await super().write(data)


async def test_a_slow_client_holds_the_agent_back(
    fargate_setup: FargateSetup, ssm_endpoint: SsmEndpoint
) -> None:
    """vkpy stops acknowledging while output waits for a slow client, so the agent
    holds it (and resends it) instead of vkpy buffering it all."""
    async with running_pod(fargate_setup) as (provider, ref):
        out = SlowSink(slow_writes=400)
        command = ["sh", "-c", "head -c 3000000 /dev/zero | tr '\\0' a"]
        io = StreamIO(stdin=None, stdout=out, stderr=None, tty=False)
        assert await provider.exec_in_container(ref, "app", command, io) == 0
        assert out.data == b"a" * 3_000_000
        assert ssm_endpoint.session().most_unacknowledged > 1000


async def test_lost_input_is_resent(fargate_setup: FargateSetup, ssm_endpoint: SsmEndpoint) -> None:
    async with running_pod(fargate_setup) as (provider, ref):
        ssm_endpoint.lose_next_input = True
        out = Sink()
        io = StreamIO(
            stdin=Source(b"first\n", b"second\n", b""), stdout=out, stderr=None, tty=False
        )
        assert await provider.exec_in_container(ref, "app", ["cat"], io) == 0
        assert ssm_endpoint.lost == 1
        assert out.data == b"first\nsecond\n"
