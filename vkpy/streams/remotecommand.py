"""What exec, attach and port-forward mean on top of SPDY or WebSocket, without the transport.

Both transports carry the same Kubernetes conventions: the ``streamtype`` header (or the
channel number) says which stream is stdin, stdout, stderr, the error stream or the
resize stream; the client offers protocol versions and the server picks the first one it
supports; and when the command ends the error stream carries the outcome, as plain text
for the versions before v4 and as a metav1.Status JSON from v4 on.  Port-forward over
SPDY pairs a data and an error stream per forwarded connection by their ``requestid``.
These rules live here once so that the SPDY and WebSocket handlers in ``vkpy.api`` cannot
drift apart.
"""

from __future__ import annotations

import enum
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from vkpy.streams.channels import BASE64_CHANNEL_V4, split_offered

HEADER_STREAM_TYPE = "streamtype"
HEADER_PORT = "port"
HEADER_REQUEST_ID = "requestid"
HEADER_PROTOCOL_VERSION = "X-Stream-Protocol-Version"
HEADER_ACCEPTED_PROTOCOL_VERSIONS = "X-Accepted-Stream-Protocol-Versions"

PROTOCOL_V1 = "channel.k8s.io"
PROTOCOL_V2 = "v2.channel.k8s.io"
PROTOCOL_V3 = "v3.channel.k8s.io"
PROTOCOL_V4 = "v4.channel.k8s.io"
PROTOCOL_V5 = "v5.channel.k8s.io"
SPDY_REMOTECOMMAND_PROTOCOLS: tuple[str, ...] = (
    PROTOCOL_V5,
    PROTOCOL_V4,
    PROTOCOL_V3,
    PROTOCOL_V2,
    PROTOCOL_V1,
)
"""Exec/attach protocol versions we accept over SPDY, most preferred first."""
PORTFORWARD_PROTOCOL = "portforward.k8s.io"
SPDY_PORTFORWARD_PROTOCOLS: tuple[str, ...] = (PORTFORWARD_PROTOCOL,)

_RESIZE_PROTOCOLS = frozenset({PROTOCOL_V3, PROTOCOL_V4, PROTOCOL_V5})
_STATUS_JSON_PROTOCOLS = frozenset({PROTOCOL_V4, PROTOCOL_V5, BASE64_CHANNEL_V4})


class StreamType(enum.StrEnum):
    ERROR = "error"
    STDIN = "stdin"
    STDOUT = "stdout"
    STDERR = "stderr"
    RESIZE = "resize"
    DATA = "data"
    """Port-forward only."""


def negotiate(
    header_values: Sequence[str], supported: Sequence[str] = SPDY_REMOTECOMMAND_PROTOCOLS
) -> str | None:
    """The first protocol the client offers that we support, else ``None``.

    Values may repeat the header or hold comma lists. The caller answers 400 when
    ``split_offered(header_values)`` is empty, and 403 with
    one ``X-Accepted-Stream-Protocol-Versions`` header per supported version when this
    returns ``None``.
    """
    return next((name for name in split_offered(header_values) if name in supported), None)


def supports_resize(protocol: str) -> bool:
    """Whether a SPDY exec/attach protocol version has a resize stream (v3 and later)."""
    return protocol in _RESIZE_PROTOCOLS


@dataclass(frozen=True, slots=True)
class StreamOptions:
    """Which streams an exec/attach asked for (query ``input``, ``output``, ``error``, ``tty``)."""

    stdin: bool = False
    stdout: bool = False
    stderr: bool = False
    tty: bool = False

    @classmethod
    def from_query(cls, query: Mapping[str, str]) -> StreamOptions:
        """Read the query; with a tty there is no separate stderr, as in the kubelet."""
        tty = query.get("tty") == "1"
        return cls(
            stdin=query.get("input") == "1",
            stdout=query.get("output") == "1",
            stderr=query.get("error") == "1" and not tty,
            tty=tty,
        )

    @property
    def any_io(self) -> bool:
        """The kubelet refuses a request with none of stdin, stdout and stderr."""
        return self.stdin or self.stdout or self.stderr

    def expected_streams(self, protocol: str) -> frozenset[StreamType]:
        """The SPDY streams the client will open before the command can start."""
        wanted = {StreamType.ERROR}
        for flag, kind in (
            (self.stdin, StreamType.STDIN),
            (self.stdout, StreamType.STDOUT),
            (self.stderr, StreamType.STDERR),
            (self.tty and supports_resize(protocol), StreamType.RESIZE),
        ):
            if flag:
                wanted.add(kind)
        return frozenset(wanted)


# --- the outcome on the error stream ---------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Success:
    pass


@dataclass(frozen=True, slots=True)
class ExitCode:
    """The command ran and exited non-zero."""

    code: int
    detail: str | None = None
    """Text after "command terminated with non-zero exit code: " (default: the code)."""


@dataclass(frozen=True, slots=True)
class InternalError:
    """The command could not be run or followed (what the kubelet reports as a 500)."""

    message: str


Outcome = Success | ExitCode | InternalError
StatusJSON = dict[str, object]


def status_object(outcome: Outcome) -> StatusJSON:
    """The metav1.Status for an outcome, with keys in the order Go marshals them."""
    if isinstance(outcome, Success):
        return {"metadata": {}, "status": "Success"}
    if isinstance(outcome, ExitCode):
        detail = str(outcome.code) if outcome.detail is None else outcome.detail
        return {
            "metadata": {},
            "status": "Failure",
            "message": f"command terminated with non-zero exit code: {detail}",
            "reason": "NonZeroExitCode",
            "details": {"causes": [{"reason": "ExitCode", "message": str(outcome.code)}]},
        }
    return {
        "metadata": {},
        "status": "Failure",
        "message": f"Internal error occurred: {outcome.message}",
        "reason": "InternalError",
        "details": {"causes": [{"message": outcome.message}]},
        "code": 500,
    }


def error_stream_payload(protocol: str, outcome: Outcome) -> bytes:
    """What to write on the error stream before FIN; ``b""`` means write nothing.

    v4/v5 (SPDY or WebSocket, binary or base64) carry the Status JSON; older versions
    carry the Status message as text, and nothing at all on success.
    """
    status = status_object(outcome)
    if protocol in _STATUS_JSON_PROTOCOLS:
        return go_json(status)
    if isinstance(outcome, Success):
        return b""
    return str(status["message"]).encode("utf-8")


def go_json(value: object) -> bytes:
    """Compact JSON escaped the way Go's encoding/json does (``<``, ``>``, ``&``, U+2028/9)."""
    text = json.dumps(value, separators=(",", ":"), ensure_ascii=False)
    for char, escape in _GO_ESCAPES:
        text = text.replace(char, escape)
    return text.encode("utf-8")


_GO_ESCAPES = (
    ("<", "\\u003c"),
    (">", "\\u003e"),
    ("&", "\\u0026"),
    ("\u2028", "\\u2028"),
    ("\u2029", "\\u2029"),
)


# --- port-forward over SPDY --------------------------------------------------------------------


class PortForwardStreamError(ValueError):
    """A port-forward stream that cannot be paired; report it on the error stream."""

    def __init__(self, request_id: str, detail: str) -> None:
        super().__init__(f"error processing stream for request {request_id}: {detail}")
        self.request_id = request_id


@dataclass(frozen=True, slots=True)
class PortForwardRequest:
    """A complete data/error stream pair for one forwarded connection."""

    request_id: str
    port: int
    data_stream: int
    error_stream: int


@dataclass(slots=True)
class _HalfPair:
    data_stream: int | None = None
    error_stream: int | None = None
    port_header: str | None = None


class PortForwardPairer:
    """Pairs SPDY streams into ``PortForwardRequest``s by ``requestid``.

    Clients too old to send ``requestid`` open error then data with consecutive odd ids;
    as in the kubelet, such streams are paired by ``id`` (error) and ``id - 2`` (data).
    Timing out an incomplete pair is the caller's job (``discard``).
    """

    def __init__(self, max_pending: int = 256) -> None:
        self._max_pending = max_pending
        self._pending: dict[str, _HalfPair] = {}

    @property
    def pending(self) -> frozenset[str]:
        return frozenset(self._pending)

    def discard(self, request_id: str) -> None:
        self._pending.pop(request_id, None)

    def add(self, stream_id: int, headers: Mapping[str, str]) -> PortForwardRequest | None:
        """Record a new stream; return the request once both of its streams are here."""
        kind = headers.get(HEADER_STREAM_TYPE, "")
        request_id = headers.get(HEADER_REQUEST_ID) or _legacy_request_id(stream_id, kind)
        half = self._pending.get(request_id)
        if half is None:
            if len(self._pending) >= self._max_pending:
                raise PortForwardStreamError(request_id, "too many pending requests")
            half = self._pending[request_id] = _HalfPair()
        self._assign(half, request_id, stream_id, kind, headers)
        if half.data_stream is None or half.error_stream is None:
            return None
        del self._pending[request_id]
        port = parse_port(request_id, half.port_header)
        return PortForwardRequest(request_id, port, half.data_stream, half.error_stream)

    @staticmethod
    def _assign(
        half: _HalfPair, request_id: str, stream_id: int, kind: str, headers: Mapping[str, str]
    ) -> None:
        if kind == StreamType.DATA and half.data_stream is None:
            half.data_stream = stream_id
            half.port_header = headers.get(HEADER_PORT)
        elif kind == StreamType.ERROR and half.error_stream is None:
            half.error_stream = stream_id
        elif kind in (StreamType.DATA, StreamType.ERROR):
            raise PortForwardStreamError(request_id, f"{kind} stream already assigned")
        else:
            raise PortForwardStreamError(request_id, f"invalid stream type {kind!r}")


def _legacy_request_id(stream_id: int, kind: str) -> str:
    return str(stream_id - 2 if kind == StreamType.DATA else stream_id)


def parse_port(request_id: str, value: str | None) -> int:
    """The ``port`` header as the kubelet reads it: a decimal uint16 other than 0."""
    if value is None or not value.isascii() or not value.isdigit():
        raise PortForwardStreamError(request_id, f"unable to parse port {value!r}")
    port = int(value)
    if not 0 < port <= 0xFFFF:
        raise PortForwardStreamError(request_id, f"invalid port {port}")
    return port
