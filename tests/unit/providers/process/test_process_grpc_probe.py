"""gRPC probes against a real gRPC server (grpcio's health service on loopback),
with the kubelet's verdicts and messages."""

from __future__ import annotations

import socket
from collections.abc import AsyncIterator

import grpc
import pytest
from grpc_health.v1 import health, health_pb2, health_pb2_grpc

from vkpy.providers.process.grpc_probe import check, decode_status, encode_request

UA = "kube-probe/1.36"


@pytest.fixture
async def server() -> AsyncIterator[tuple[int, health.aio.HealthServicer]]:
    servicer = health.aio.HealthServicer()
    srv = grpc.aio.server()
    health_pb2_grpc.add_HealthServicer_to_server(servicer, srv)
    port = srv.add_insecure_port("127.0.0.1:0")
    await srv.start()
    await servicer.set("", health_pb2.HealthCheckResponse.SERVING)
    await servicer.set("db", health_pb2.HealthCheckResponse.NOT_SERVING)
    yield port, servicer
    await srv.stop(None)


@pytest.fixture
async def bare_server() -> AsyncIterator[int]:
    """A gRPC server without the health service."""
    srv = grpc.aio.server()
    port = srv.add_insecure_port("127.0.0.1:0")
    await srv.start()
    yield port
    await srv.stop(None)


def test_messages_round_trip_with_protobuf() -> None:
    request = health_pb2.HealthCheckRequest(service="my.service")
    assert encode_request("my.service")[5:] == request.SerializeToString()
    assert encode_request("") == b"\0\0\0\0\0"
    for status in (0, 1, 2, 3):
        raw = health_pb2.HealthCheckResponse(status=status).SerializeToString()  # type: ignore[arg-type]
        assert decode_status(raw) == status


async def test_serving_and_not_serving(server: tuple[int, health.aio.HealthServicer]) -> None:
    port, servicer = server
    ok = await check("127.0.0.1", port, "", 1.0, UA)
    assert ok.ok and ok.message == "service healthy"
    bad = await check("127.0.0.1", port, "db", 1.0, UA)
    assert not bad.ok
    assert bad.message == 'service unhealthy (responded with "NOT_SERVING")'
    await servicer.set("", health_pb2.HealthCheckResponse.NOT_SERVING)
    assert not (await check("127.0.0.1", port, "", 1.0, UA)).ok


async def test_an_unknown_service_is_an_rpc_error(
    server: tuple[int, health.aio.HealthServicer],
) -> None:
    port, _ = server
    result = await check("127.0.0.1", port, "nope", 1.0, UA)
    assert not result.ok
    assert result.message.startswith("error: health rpc probe failed: rpc error: code = NotFound")


async def test_a_server_without_the_health_service(bare_server: int) -> None:
    result = await check("127.0.0.1", bare_server, "", 1.0, UA)
    assert not result.ok
    assert result.message.startswith(
        "error: this server does not implement the grpc health protocol (grpc.health.v1.Health)"
    )


async def test_nothing_listening() -> None:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    result = await check("127.0.0.1", port, "", 1.0, UA)
    assert not result.ok
    assert result.message.startswith(f'error: failed to connect service at "127.0.0.1:{port}"')


async def test_a_server_that_never_answers_times_out() -> None:
    with socket.socket() as silent:
        silent.bind(("127.0.0.1", 0))
        silent.listen()
        port = silent.getsockname()[1]
        result = await check("127.0.0.1", port, "", 0.5, UA)
    assert not result.ok
    assert result.message == "timeout: health rpc did not complete within 0.5s"
