"""The Session Manager data channel codec on byte-exact messages: the header layout
of the reference client (github.com/aws/session-manager-plugin, src/message),
digests, acknowledgements, order, retransmission, the handshake, sizes, the close."""

from __future__ import annotations

import hashlib
import json
import uuid

import pytest

from vkpy.streams import ssm_channel
from vkpy.streams.ssm_channel import (
    AgentMessage,
    ChannelEndpoint,
    Closed,
    Delivered,
    DigestError,
    Paused,
    PayloadType,
    Refused,
    WindowError,
)

ID = uuid.UUID("00112233-4455-6677-8899-aabbccddeeff")
CREATED = 1_700_000_000_000


def expected_bytes(
    kind: str, seq: int, payload_type: int, payload: bytes, flags: int = 0, ident: uuid.UUID = ID
) -> bytes:
    """The layout written out field by field, independently of the codec."""
    return b"".join(
        [
            (116).to_bytes(4, "big"),  # HeaderLength
            kind.encode().ljust(32, b" "),  # MessageType, space padded
            (1).to_bytes(4, "big"),  # SchemaVersion
            CREATED.to_bytes(8, "big"),  # CreatedDate (ms)
            seq.to_bytes(8, "big", signed=True),  # SequenceNumber
            flags.to_bytes(8, "big"),  # Flags
            ident.bytes[8:16] + ident.bytes[0:8],  # MessageId: low half first
            hashlib.sha256(payload).digest(),  # PayloadDigest
            payload_type.to_bytes(4, "big"),  # PayloadType
            len(payload).to_bytes(4, "big"),  # PayloadLength
            payload,
        ]
    )


def test_header_layout_is_byte_exact() -> None:
    message = AgentMessage("input_stream_data", 5, PayloadType.OUTPUT, b"hi", ID, CREATED)
    data = ssm_channel.encode(message)
    assert data == expected_bytes("input_stream_data", 5, 1, b"hi")
    assert len(data) == 120 + 2
    assert data[:4] == b"\x00\x00\x00\x74"
    assert data[64:80] == bytes.fromhex("8899aabbccddeeff0011223344556677")
    assert data[80:112] == bytes.fromhex(
        "8f434346648f6b96df89dda901c5176b10a6d83961dd3c1ac88b59b2dc327aa4"
    )


def test_decode_reads_what_the_reference_layout_holds() -> None:
    raw = expected_bytes("output_stream_data", 7, 11, b"err\n", flags=1)
    message = ssm_channel.decode(raw)
    assert message.message_type == "output_stream_data"
    assert message.sequence_number == 7
    assert message.payload_type == PayloadType.STDERR
    assert message.payload == b"err\n"
    assert message.message_id == ID
    assert message.created_date == CREATED
    assert message.flags == 1


def test_bad_digest_is_refused() -> None:
    raw = bytearray(expected_bytes("output_stream_data", 0, 1, b"hello"))
    raw[-1] ^= 0x20  # "hellO": the digest no longer matches
    with pytest.raises(DigestError):
        ssm_channel.decode(bytes(raw))


def test_truncated_and_inconsistent_messages_are_refused() -> None:
    raw = expected_bytes("output_stream_data", 0, 1, b"hello")
    with pytest.raises(ssm_channel.ChannelError):
        ssm_channel.decode(raw[:100])
    with pytest.raises(ssm_channel.ChannelError):
        ssm_channel.decode(raw[:-1])  # PayloadLength says 5, 4 follow


def client(now_ms: int = CREATED) -> ChannelEndpoint:
    ids = iter(uuid.UUID(int=i) for i in range(1, 10**6))
    return ChannelEndpoint(
        sends=ssm_channel.INPUT_STREAM_DATA, clock_ms=lambda: now_ms, new_id=lambda: next(ids)
    )


def output(seq: int, payload: bytes, payload_type: int = 1) -> bytes:
    return expected_bytes("output_stream_data", seq, payload_type, payload)


def acks_in(outbox: list[bytes]) -> list[dict[str, object]]:
    found = []
    for data in outbox:
        message = ssm_channel.decode(data)
        assert message.message_type == "acknowledge"
        assert message.flags == 3
        found.append(json.loads(message.payload))
    return found


def test_acknowledgement_is_byte_exact() -> None:
    side = client()
    assert side.receive(output(0, b"a"), 0.0) == [
        Delivered(1, b"a", ssm_channel.decode(output(0, b"a")))
    ]
    (ack,) = side.take_outbox()
    payload = (
        b'{"AcknowledgedMessageType":"output_stream_data",'
        b'"AcknowledgedMessageId":"00112233-4455-6677-8899-aabbccddeeff",'
        b'"AcknowledgedMessageSequenceNumber":0,"IsSequentialMessage":true}'
    )
    assert ack == expected_bytes("acknowledge", 0, 0, payload, flags=3, ident=uuid.UUID(int=1))


def test_a_bad_digest_is_dropped_without_acknowledgement_and_the_resend_delivered() -> None:
    side = client()
    broken = bytearray(output(0, b"data"))
    broken[-2] ^= 1
    events = side.receive(bytes(broken), 0.0)
    assert len(events) == 1 and isinstance(events[0], Refused)
    assert side.take_outbox() == []  # no ack: the agent resends
    assert side.expected_sequence == 0
    (delivered,) = side.receive(output(0, b"data"), 0.1)
    assert isinstance(delivered, Delivered) and delivered.payload == b"data"
    assert [a["AcknowledgedMessageSequenceNumber"] for a in acks_in(side.take_outbox())] == [0]


def test_delivery_is_in_order_and_duplicates_are_acknowledged_not_delivered() -> None:
    side = client()
    assert side.receive(output(2, b"c"), 0.0) == []
    assert side.receive(output(1, b"b"), 0.0) == []
    delivered = side.receive(output(0, b"a"), 0.0)
    assert [e.payload for e in delivered if isinstance(e, Delivered)] == [b"a", b"b", b"c"]
    assert side.receive(output(1, b"b"), 0.0) == []  # a resend of something delivered
    acked = [a["AcknowledgedMessageSequenceNumber"] for a in acks_in(side.take_outbox())]
    assert acked == [2, 1, 0, 1]


def test_a_sequence_number_beyond_the_window_is_refused() -> None:
    side = client()
    far = output(ssm_channel.WINDOW, b"x")
    assert isinstance(side.receive(far, 0.0)[0], Refused)
    assert side.take_outbox() == []
    strict = ChannelEndpoint(
        sends="output_stream_data", clock_ms=lambda: CREATED, strict_window=True
    )
    with pytest.raises(WindowError):
        strict.receive(expected_bytes("input_stream_data", ssm_channel.WINDOW, 1, b"x"), 0.0)
    assert strict.receive(expected_bytes("input_stream_data", 9999, 1, b"x"), 0.0) == []


def test_unacknowledged_input_is_resent_until_acknowledged() -> None:
    side = client()
    sent = side.send_stream(PayloadType.OUTPUT, b"ls\n", now=10.0)
    assert sent == expected_bytes("input_stream_data", 0, 1, b"ls\n", ident=uuid.UUID(int=1))
    side.take_outbox()
    assert side.due(10.1) == []  # within the 200 ms default timeout
    assert side.due(10.25) == [sent]  # the very same bytes again
    assert side.due(10.3) == []  # its timer restarted
    ack_payload = (
        b'{"AcknowledgedMessageType":"input_stream_data","AcknowledgedMessageId":"x",'
        b'"AcknowledgedMessageSequenceNumber":0,"IsSequentialMessage":true}'
    )
    assert side.receive(expected_bytes("acknowledge", 0, 0, ack_payload, flags=3), 10.4) == []
    assert side.unacknowledged == 0
    assert side.due(20.0) == []


def test_resend_all_after_a_reconnect_keeps_order() -> None:
    side = client()
    first = side.send_stream(PayloadType.OUTPUT, b"1", 0.0)
    second = side.send_stream(PayloadType.SIZE, b"2", 0.0)
    side.take_outbox()
    assert side.resend_all(0.0) == [first, second]


def test_round_trip_time_sets_the_retransmission_timeout() -> None:
    side = client()
    side.send_stream(PayloadType.OUTPUT, b"a", 0.0)
    ack = json.dumps({"AcknowledgedMessageSequenceNumber": 0}).encode()
    side.receive(expected_bytes("acknowledge", 0, 0, ack, flags=3), 0.5)
    # RTT 0.1·7/8 + 0.5/8 = 0.15; RTTVAR 0·3/4 + |0.1-0.5|/4 = 0.1; RTO = 0.15 + 4·0.1
    assert side.round_trip_time == pytest.approx(0.15)
    assert side.retransmission_timeout == pytest.approx(0.55)


def test_handshake_response_accepts_the_session_type_and_refuses_kms() -> None:
    payload, session_type = ssm_channel.handshake_response(
        "vkpy-1",
        [
            {
                "ActionType": "SessionType",
                "ActionParameters": {"SessionType": "InteractiveCommands", "Properties": {}},
            },
            {"ActionType": "KMSEncryption", "ActionParameters": {"KMSKeyId": "k"}},
        ],
    )
    assert session_type == "InteractiveCommands"
    assert payload == (
        b'{"ClientVersion":"vkpy-1","ProcessedClientActions":['
        b'{"ActionType":"SessionType","ActionStatus":1,"ActionResult":null},'
        b'{"ActionType":"KMSEncryption","ActionStatus":3,"ActionResult":null,'
        b'"Error":"Unsupported action KMSEncryption"}],'
        b'"Errors":["Unsupported action KMSEncryption"]}'
    )


def test_size_open_and_close_messages() -> None:
    assert ssm_channel.size_payload(120, 40) == b'{"cols":120,"rows":40}'
    opening = json.loads(ssm_channel.open_data_channel("tok", "cid", "rid", "v"))
    assert opening == {
        "MessageSchemaVersion": "1.0",
        "RequestId": "rid",
        "TokenValue": "tok",
        "ClientId": "cid",
        "ClientVersion": "v",
    }
    side = client()
    closed = ssm_channel.channel_closed_payload("s-1", "Exited", "2024-01-01T00:00:00Z", "m")
    assert side.receive(expected_bytes("channel_closed", 0, 0, closed), 0.0) == [Closed("Exited")]
    assert side.receive(expected_bytes("pause_publication", 0, 0, b""), 0.0) == [Paused(True)]
    assert side.paused
    assert side.receive(expected_bytes("start_publication", 0, 0, b""), 0.0) == [Paused(False)]
