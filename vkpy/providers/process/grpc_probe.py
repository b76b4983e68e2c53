"""gRPC probes: one `grpc.health.v1.Health/Check` call over HTTP/2 cleartext.

The kubelet's gRPC prober dials the pod's address and port without TLS, sends a
HealthCheckRequest for the probe's `service` ("" by default: the server as a
whole) with `User-Agent: kube-probe/<version>`, and succeeds only when the answer is
SERVING; everything must finish within the probe's timeout. Its failure messages
are reproduced: no connection, a server without the health service (UNIMPLEMENTED),
the deadline, any other RPC error, or a status other than SERVING.

The call is small enough to speak directly: the HTTP/2 framing comes from the `h2`
package (sans-IO, driven here over an asyncio connection), the two protobuf messages
have one field each and are encoded by hand.
"""

from __future__ import annotations

import asyncio
import contextlib
import struct
from dataclasses import dataclass
from urllib.parse import unquote

import h2.config
import h2.connection
import h2.events
import h2.exceptions

PATH = "/grpc.health.v1.Health/Check"
SERVING_STATUSES = {0: "UNKNOWN", 1: "SERVING", 2: "NOT_SERVING", 3: "SERVICE_UNKNOWN"}
CODES = {
    0: "OK",
    1: "Canceled",
    2: "Unknown",
    3: "InvalidArgument",
    4: "DeadlineExceeded",
    5: "NotFound",
    6: "AlreadyExists",
    7: "PermissionDenied",
    8: "ResourceExhausted",
    9: "FailedPrecondition",
    10: "Aborted",
    11: "OutOfRange",
    12: "Unimplemented",
    13: "Internal",
    14: "Unavailable",
    15: "DataLoss",
    16: "Unauthenticated",
}
UNIMPLEMENTED = 12
DEADLINE_EXCEEDED = 4
READ_SIZE = 64 * 1024
MAX_RESPONSE = 64 * 1024


@dataclass(frozen=True)
class GrpcResult:
    ok: bool
    message: str


class RpcError(Exception):
    def __init__(self, code: int, message: str) -> None:
        super().__init__(f"rpc error: code = {CODES.get(code, f'Code({code})')} desc = {message}")
        self.code = code
        self.detail = message


def _varint(value: int) -> bytes:
    out = bytearray()
    while True:
        byte = value & 0x7F
        value >>= 7
        if value:
            out.append(byte | 0x80)
        else:
            out.append(byte)
            return bytes(out)


def encode_request(service: str) -> bytes:
    """A length-prefixed gRPC message holding HealthCheckRequest{service}."""
    body = b""
    if service:
        raw = service.encode()
        body = b"\x0a" + _varint(len(raw)) + raw
    return struct.pack(">BI", 0, len(body)) + body


def _read_varint(data: bytes, at: int) -> tuple[int, int]:
    value = shift = 0
    while True:
        if at >= len(data):
            raise ValueError("truncated varint")
        byte = data[at]
        at += 1
        value |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return value, at
        shift += 7


def decode_status(message: bytes) -> int:
    """The `status` field of a HealthCheckResponse (0, UNKNOWN, when absent)."""
    status = 0
    at = 0
    while at < len(message):
        key, at = _read_varint(message, at)
        field, wire = key >> 3, key & 7
        if wire == 0:
            value, at = _read_varint(message, at)
            if field == 1:
                status = value
        elif wire == 2:
            length, at = _read_varint(message, at)
            at += length
        elif wire == 1:
            at += 8
        elif wire == 5:
            at += 4
        else:
            raise ValueError(f"unexpected wire type {wire}")
    return status


def _unframe(body: bytes) -> bytes:
    if len(body) < 5:
        raise RpcError(13, "no response message")
    compressed, length = struct.unpack(">BI", body[:5])
    if compressed:
        raise RpcError(13, "compressed response without an agreed encoding")
    return body[5 : 5 + length]


async def _exchange(
    host: str, port: int, service: str, user_agent: str, timeout: float, connected: list[bool]
) -> int:
    """The serving status the server answers; RpcError for a gRPC error. `connected`
    gets True once the connection is open (the kubelet words timeouts by it)."""
    reader, writer = await asyncio.open_connection(host, port)
    connected.append(True)
    try:
        conn = h2.connection.H2Connection(
            config=h2.config.H2Configuration(client_side=True, header_encoding="utf-8")
        )
        conn.initiate_connection()
        stream = conn.get_next_available_stream_id()
        authority = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
        conn.send_headers(
            stream,
            [
                (":method", "POST"),
                (":scheme", "http"),
                (":path", PATH),
                (":authority", authority),
                ("content-type", "application/grpc"),
                ("te", "trailers"),
                ("user-agent", user_agent),
                ("grpc-timeout", f"{max(1, int(timeout * 1000))}m"),
            ],
        )
        conn.send_data(stream, encode_request(service), end_stream=True)
        writer.write(conn.data_to_send())
        await writer.drain()
        body = bytearray()
        headers: dict[str, str] = {}
        while True:
            data = await reader.read(READ_SIZE)
            if not data:
                raise RpcError(14, "the connection was closed before the answer was complete")
            for event in conn.receive_data(data):
                if isinstance(event, h2.events.ResponseReceived | h2.events.TrailersReceived):
                    headers.update({str(k): str(v) for k, v in event.headers})
                elif isinstance(event, h2.events.DataReceived):
                    body += event.data
                    conn.acknowledge_received_data(event.flow_controlled_length, stream)
                    if len(body) > MAX_RESPONSE:
                        raise RpcError(8, "response too large")
                elif isinstance(event, h2.events.StreamReset):
                    raise RpcError(13, f"stream reset by the server (code {event.error_code})")
                elif isinstance(event, h2.events.ConnectionTerminated):
                    raise RpcError(14, "the server closed the connection")
                elif isinstance(event, h2.events.StreamEnded):
                    return _answer(headers, bytes(body))
            writer.write(conn.data_to_send())
            await writer.drain()
    finally:
        writer.close()
        with contextlib.suppress(OSError):
            await writer.wait_closed()


def _answer(headers: dict[str, str], body: bytes) -> int:
    http_status = headers.get(":status", "")
    if http_status != "200":
        raise RpcError(14, f"unexpected HTTP status code received from server: {http_status}")
    code = int(headers.get("grpc-status", "2") or 2)
    if code != 0:
        raise RpcError(code, unquote(headers.get("grpc-message", "")))
    return decode_status(_unframe(body))


def _duration(seconds: float) -> str:
    return f"{seconds:g}s"


async def check(host: str, port: int, service: str, timeout: float, user_agent: str) -> GrpcResult:
    """One health check, with the kubelet's verdict and message."""
    address = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
    connected: list[bool] = []
    try:
        async with asyncio.timeout(timeout):
            try:
                status = await _exchange(host, port, service, user_agent, timeout, connected)
            except OSError as error:
                if connected:
                    raise RpcError(14, f"connection error: {error}") from None
                return GrpcResult(
                    False, f'error: failed to connect service at "{address}": {error}'
                )
    except TimeoutError:
        if not connected:
            return GrpcResult(
                False,
                f'timeout: failed to connect service "{address}" within {_duration(timeout)}: '
                "context deadline exceeded",
            )
        return GrpcResult(
            False, f"timeout: health rpc did not complete within {_duration(timeout)}"
        )
    except RpcError as error:
        if error.code == UNIMPLEMENTED:
            return GrpcResult(
                False,
                "error: this server does not implement the grpc health protocol "
                f"(grpc.health.v1.Health): {error.detail}",
            )
        if error.code == DEADLINE_EXCEEDED:
            return GrpcResult(
                False, f"timeout: health rpc did not complete within {_duration(timeout)}"
            )
        return GrpcResult(False, f"error: health rpc probe failed: {error}")
    except (ValueError, h2.exceptions.ProtocolError) as error:
        return GrpcResult(False, f"error: health rpc probe failed: {error}")
    if status != 1:
        name = SERVING_STATUSES.get(status, str(status))
        return GrpcResult(False, f'service unhealthy (responded with "{name}")')
    return GrpcResult(True, "service healthy")
