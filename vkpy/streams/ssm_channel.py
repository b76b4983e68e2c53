"""The AWS Session Manager data channel (what ECS Exec speaks) as a sans-IO codec.

ECS `ExecuteCommand` answers with a Session Manager session: a WebSocket URL on
`ssmmessages` and a token. The client's first WebSocket message is a JSON text
message carrying the token; everything after is binary *agent messages*: a
116-byte big-endian header (length, type name, schema version, creation time,
sequence number, flags, message id, the SHA-256 digest of the payload, payload
type) followed by the payload length and the payload. Stream data
(`input_stream_data` from the client, `output_stream_data` from the agent) is
numbered per direction from 0; each message is acknowledged by the receiver
(`acknowledge`, a JSON payload naming the sequence number), delivered strictly in
order, and resent by its sender until acknowledged. The agent opens with a
handshake (request, the client's response, complete) before any output; terminal
sizes are input messages of payload type Size; the agent ends the session with
`channel_closed`.

The facts follow the reference client, github.com/aws/session-manager-plugin
(src/message, src/datachannel, src/config). `ChannelEndpoint` keeps one side's
state (sequence numbers, the unacknowledged outgoing messages and their
retransmission timer, the out-of-order incoming buffer); the caller moves the
bytes and the time. The client and the tests' local endpoint both use it.
"""

from __future__ import annotations

import enum
import hashlib
import json
import struct
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field

INPUT_STREAM_DATA = "input_stream_data"
OUTPUT_STREAM_DATA = "output_stream_data"
ACKNOWLEDGE = "acknowledge"
CHANNEL_CLOSED = "channel_closed"
START_PUBLICATION = "start_publication"
PAUSE_PUBLICATION = "pause_publication"

MESSAGE_SCHEMA_VERSION = "1.0"
"""`MessageSchemaVersion` of the open-data-channel message."""

_TYPE_LENGTH = 32
_PREFIX = struct.Struct(">I32sIQqQ16s32sI")
"""HeaderLength, MessageType, SchemaVersion, CreatedDate, SequenceNumber, Flags,
MessageId, PayloadDigest, PayloadType: everything before PayloadLength."""
HEADER_LENGTH = _PREFIX.size
"""116: the value of the HeaderLength field (the PayloadLength field follows it)."""
_PAYLOAD_LENGTH = struct.Struct(">I")
PAYLOAD_OFFSET = HEADER_LENGTH + _PAYLOAD_LENGTH.size

ACK_FLAGS = 3
"""The Flags value the reference client puts on acknowledgements."""

DEFAULT_RETRANSMISSION_TIMEOUT = 0.2
DEFAULT_ROUND_TRIP_TIME = 0.1
CLOCK_GRANULARITY = 0.01
MAX_RETRANSMISSION_TIMEOUT = 1.0
RTT_GAIN = 1 / 8
RTT_VARIATION_GAIN = 1 / 4
RESEND_MAX_ATTEMPTS = 3000
"""After this many resends of one message the session has failed (5 min at 100 ms)."""
WINDOW = 10000
"""Messages a side keeps unacknowledged / buffers out of order (the reference
client's buffer capacities). A sender waits for acknowledgements before going past
it; a receiver refuses a sequence number beyond it."""
STREAM_PAYLOAD_SIZE = 1024
"""The reference client's largest input payload."""


class PayloadType(enum.IntEnum):
    OUTPUT = 1
    ERROR = 2
    SIZE = 3
    PARAMETER = 4
    HANDSHAKE_REQUEST = 5
    HANDSHAKE_RESPONSE = 6
    HANDSHAKE_COMPLETE = 7
    ENC_CHALLENGE_REQUEST = 8
    ENC_CHALLENGE_RESPONSE = 9
    FLAG = 10
    STDERR = 11
    EXIT_CODE = 12


class Flag(enum.IntEnum):
    """Payloads of a FLAG message (4 bytes, big-endian)."""

    DISCONNECT_TO_PORT = 1
    TERMINATE_SESSION = 2
    CONNECT_TO_PORT_ERROR = 3


class ChannelError(ValueError):
    """A message that breaks the data channel protocol."""


class DigestError(ChannelError):
    """A message whose payload does not match its SHA-256 digest."""


class WindowError(ChannelError):
    """A stream message numbered beyond what the receiver may buffer."""


@dataclass(frozen=True)
class AgentMessage:
    """One binary message of the data channel."""

    message_type: str
    sequence_number: int
    payload_type: int
    payload: bytes
    message_id: uuid.UUID
    created_date: int
    """Milliseconds since the epoch."""
    flags: int = 0
    schema_version: int = 1
    payload_digest: bytes | None = None
    """As received; None on messages built here (encode computes it)."""


def encode(message: AgentMessage) -> bytes:
    """The message's bytes, its digest computed from its payload."""
    name = message.message_type.encode("ascii")
    if len(name) > _TYPE_LENGTH:
        raise ChannelError(f"message type {message.message_type!r} is longer than 32 bytes")
    ident = message.message_id.bytes
    digest = hashlib.sha256(message.payload).digest()
    header = _PREFIX.pack(
        HEADER_LENGTH,
        name.ljust(_TYPE_LENGTH, b" "),
        message.schema_version,
        message.created_date,
        message.sequence_number,
        message.flags,
        ident[8:] + ident[:8],  # the UUID's low 64 bits first, then its high 64 bits
        digest,
        message.payload_type,
    )
    return header + _PAYLOAD_LENGTH.pack(len(message.payload)) + message.payload


def decode(data: bytes) -> AgentMessage:
    """Parse one message and verify its digest (ChannelError, DigestError)."""
    if len(data) < PAYLOAD_OFFSET:
        raise ChannelError(f"message of {len(data)} bytes is shorter than its header")
    (
        header_length,
        name,
        schema_version,
        created_date,
        sequence_number,
        flags,
        ident,
        digest,
        payload_type,
    ) = _PREFIX.unpack_from(data)
    if header_length < HEADER_LENGTH or header_length + 4 > len(data):
        raise ChannelError(f"bad header length {header_length}")
    (payload_length,) = _PAYLOAD_LENGTH.unpack_from(data, header_length)
    payload = data[header_length + 4 :]
    if len(payload) != payload_length:
        raise ChannelError(f"payload length {payload_length} but {len(payload)} bytes follow")
    message_type = name.strip(b"\x00 ").decode("ascii", "replace")
    if not message_type:
        raise ChannelError("message type is missing")
    if created_date == 0 and message_type not in (START_PUBLICATION, PAUSE_PUBLICATION):
        raise ChannelError("created date is missing")
    if payload_length and hashlib.sha256(payload).digest() != digest:
        raise DigestError(f"payload digest mismatch on {message_type} #{sequence_number}")
    return AgentMessage(
        message_type=message_type,
        sequence_number=sequence_number,
        payload_type=payload_type,
        payload=bytes(payload),
        message_id=uuid.UUID(bytes=bytes(ident[8:] + ident[:8])),
        created_date=created_date,
        flags=flags,
        schema_version=schema_version,
        payload_digest=bytes(digest),
    )


def _json(value: object) -> str:
    """Compact JSON, as Go's encoding/json writes it."""
    return json.dumps(value, separators=(",", ":"))


def open_data_channel(token: str, client_id: str, request_id: str, client_version: str) -> str:
    """The first (text) message on the WebSocket: it presents the session token."""
    return _json(
        {
            "MessageSchemaVersion": MESSAGE_SCHEMA_VERSION,
            "RequestId": request_id,
            "TokenValue": token,
            "ClientId": client_id,
            "ClientVersion": client_version,
        }
    )


def acknowledgement(message: AgentMessage) -> bytes:
    """The JSON payload acknowledging `message`."""
    return _json(
        {
            "AcknowledgedMessageType": message.message_type,
            "AcknowledgedMessageId": str(message.message_id),
            "AcknowledgedMessageSequenceNumber": message.sequence_number,
            "IsSequentialMessage": True,
        }
    ).encode()


def size_payload(cols: int, rows: int) -> bytes:
    return _json({"cols": cols, "rows": rows}).encode()


@dataclass
class _Pending:
    data: bytes
    sequence_number: int
    sent_at: float
    resends: int = 0


@dataclass(frozen=True)
class Delivered:
    """A stream message delivered in order to the application."""

    payload_type: int
    payload: bytes
    message: AgentMessage


@dataclass(frozen=True)
class Closed:
    """The other side ended the session (`channel_closed`); `output` is its note."""

    output: str


@dataclass(frozen=True)
class Refused:
    """A message dropped without acknowledgement (its sender will resend it)."""

    reason: str


@dataclass(frozen=True)
class Paused:
    paused: bool


Event = Delivered | Closed | Refused | Paused


@dataclass
class ChannelEndpoint:
    """One side of a data channel: numbering, acknowledgements, order, retransmission.

    `send_stream` frames a payload with the next sequence number and keeps it until
    acknowledged; `receive` takes one binary WebSocket message and returns what it
    means (and queues acknowledgements); `due` returns what to resend now. Bytes to
    send accumulate in `outbox` (taken with `take_outbox`).
    """

    sends: str
    """The message type this side sends stream data as (input or output)."""
    clock_ms: Callable[[], int]
    """Milliseconds since the epoch, for CreatedDate."""
    new_id: Callable[[], uuid.UUID] = uuid.uuid4
    strict_window: bool = False
    """Refuse (WindowError) rather than drop a message beyond the window."""
    next_sequence: int = 0
    expected_sequence: int = 0
    round_trip_time: float = DEFAULT_ROUND_TRIP_TIME
    round_trip_variation: float = 0.0
    retransmission_timeout: float = DEFAULT_RETRANSMISSION_TIMEOUT
    paused: bool = False
    outbox: list[bytes] = field(default_factory=list)
    _unacked: dict[int, _Pending] = field(default_factory=dict)
    _early: dict[int, AgentMessage] = field(default_factory=dict)

    @property
    def receives(self) -> str:
        return OUTPUT_STREAM_DATA if self.sends == INPUT_STREAM_DATA else INPUT_STREAM_DATA

    @property
    def unacknowledged(self) -> int:
        return len(self._unacked)

    def window_open(self) -> bool:
        return len(self._unacked) < WINDOW

    def take_outbox(self) -> list[bytes]:
        out, self.outbox = self.outbox, []
        return out

    def message(
        self,
        message_type: str,
        payload_type: int,
        payload: bytes,
        sequence: int = 0,
        flags: int = 0,
    ) -> bytes:
        return encode(
            AgentMessage(
                message_type=message_type,
                sequence_number=sequence,
                payload_type=payload_type,
                payload=payload,
                message_id=self.new_id(),
                created_date=self.clock_ms(),
                flags=flags,
            )
        )

    def send_stream(self, payload_type: int, payload: bytes, now: float) -> bytes:
        """Frame `payload` as the next stream message; kept until acknowledged."""
        data = self.message(self.sends, payload_type, payload, self.next_sequence)
        self._unacked[self.next_sequence] = _Pending(data, self.next_sequence, now)
        self.next_sequence += 1
        self.outbox.append(data)
        return data

    def due(self, now: float) -> list[bytes]:
        """The oldest unacknowledged message if its timeout passed (the reference client
        resends one at a time, oldest first). ChannelError once it was resent too often."""
        if not self._unacked:
            return []
        oldest = self._unacked[min(self._unacked)]
        if now - oldest.sent_at <= self.retransmission_timeout:
            return []
        if oldest.resends >= RESEND_MAX_ATTEMPTS:
            raise ChannelError(
                f"message #{oldest.sequence_number} was not acknowledged after "
                f"{RESEND_MAX_ATTEMPTS} resends"
            )
        oldest.resends += 1
        oldest.sent_at = now
        self.outbox.append(oldest.data)
        return [oldest.data]

    def resend_all(self, now: float) -> list[bytes]:
        """Every unacknowledged message again, in order (after a reconnect)."""
        again = [p.data for _, p in sorted(self._unacked.items())]
        for pending in self._unacked.values():
            pending.sent_at = now
        self.outbox.extend(again)
        return again

    def receive(self, data: bytes, now: float) -> list[Event]:
        """What one binary message means; acknowledgements go to the outbox.

        A bad digest or a malformed message is refused without an acknowledgement
        (as the reference client drops it), so its sender resends it."""
        try:
            message = decode(data)
        except ChannelError as error:
            return [Refused(str(error))]
        kind = message.message_type
        if kind == ACKNOWLEDGE:
            self._acknowledged(message, now)
            return []
        if kind == CHANNEL_CLOSED:
            return [Closed(_closed_output(message.payload))]
        if kind in (START_PUBLICATION, PAUSE_PUBLICATION):
            self.paused = kind == PAUSE_PUBLICATION
            return [Paused(self.paused)]
        if kind != self.receives:
            return [Refused(f"unexpected message type {kind!r}")]
        return self._stream(message)

    def _stream(self, message: AgentMessage) -> list[Event]:
        sequence = message.sequence_number
        if sequence < self.expected_sequence:  # a resend of something delivered: ack again
            self._ack(message)
            return []
        if sequence >= self.expected_sequence + WINDOW:
            if self.strict_window:
                raise WindowError(
                    f"sequence number {sequence} is outside the window "
                    f"[{self.expected_sequence}, {self.expected_sequence + WINDOW})"
                )
            return [Refused(f"sequence number {sequence} beyond the window")]
        self._ack(message)
        if sequence > self.expected_sequence:
            self._early[sequence] = message
            return []
        events: list[Event] = []
        current: AgentMessage | None = message
        while current is not None:
            events.append(Delivered(current.payload_type, current.payload, current))
            self.expected_sequence += 1
            current = self._early.pop(self.expected_sequence, None)
        return events

    def _ack(self, message: AgentMessage) -> None:
        self.outbox.append(
            self.message(ACKNOWLEDGE, 0, acknowledgement(message), 0, flags=ACK_FLAGS)
        )

    def _acknowledged(self, message: AgentMessage, now: float) -> None:
        try:
            content = json.loads(message.payload)
            sequence = int(content["AcknowledgedMessageSequenceNumber"])
        except (ValueError, KeyError, TypeError):
            return
        pending = self._unacked.pop(sequence, None)
        if pending is None:
            return
        if pending.resends == 0:  # Karn: only first transmissions measure the round trip
            sample = now - pending.sent_at
            self.round_trip_variation = (
                1 - RTT_VARIATION_GAIN
            ) * self.round_trip_variation + RTT_VARIATION_GAIN * abs(self.round_trip_time - sample)
            self.round_trip_time = (1 - RTT_GAIN) * self.round_trip_time + RTT_GAIN * sample
            self.retransmission_timeout = min(
                MAX_RETRANSMISSION_TIMEOUT,
                self.round_trip_time + max(CLOCK_GRANULARITY, 4 * self.round_trip_variation),
            )


def _closed_output(payload: bytes) -> str:
    try:
        content = json.loads(payload)
    except ValueError:
        return ""
    return str(content.get("Output") or "") if isinstance(content, dict) else ""


def channel_closed_payload(session_id: str, output: str, created: str, message_id: str) -> bytes:
    """The JSON of a `channel_closed` message (what the agent's side sends)."""
    return _json(
        {
            "MessageId": message_id,
            "CreatedDate": created,
            "DestinationId": "",
            "SessionId": session_id,
            "MessageType": CHANNEL_CLOSED,
            "SchemaVersion": 1,
            "Output": output,
        }
    ).encode()


def handshake_response(
    client_version: str, requested: list[dict[str, object]]
) -> tuple[bytes, str | None]:
    """The client's answer to a handshake request's actions, and the session type.

    `SessionType` is accepted; `KMSEncryption` is refused (this client has no KMS
    keys to offer), as is any action it does not know."""
    processed: list[dict[str, object]] = []
    errors: list[str] = []
    session_type: str | None = None
    for action in requested:
        kind = str(action.get("ActionType"))
        if kind == "SessionType":
            parameters = action.get("ActionParameters")
            if isinstance(parameters, dict):
                session_type = str(parameters.get("SessionType") or "") or None
            processed.append({"ActionType": kind, "ActionStatus": 1, "ActionResult": None})
        else:
            error = f"Unsupported action {kind}"
            processed.append(
                {"ActionType": kind, "ActionStatus": 3, "ActionResult": None, "Error": error}
            )
            errors.append(error)
    body: dict[str, object] = {"ClientVersion": client_version, "ProcessedClientActions": processed}
    if errors:
        body["Errors"] = errors
    return _json(body).encode(), session_type
