"""Unit and property tests for the sans-IO SPDY/3.1 codec (vkpy.streams.spdy)."""

from __future__ import annotations

import hashlib
import struct
import zlib

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from vkpy.streams.spdy import (
    ConnectionClosedError,
    DataReceived,
    Event,
    GoAwayReceived,
    HeaderCompressor,
    HeaderDecompressor,
    HeadersReceived,
    PingAcknowledged,
    PingReceived,
    ProtocolError,
    RstStatus,
    SettingsReceived,
    SpdyConnection,
    SpdyLimits,
    StreamClosedError,
    StreamOpened,
    StreamReplied,
    StreamReset,
    StreamStateError,
    Violation,
    WindowUpdateReceived,
    decode_header_block,
    encode_header_block,
    header_values,
)
from vkpy.streams.spdy_dictionary import SPDY3_DICTIONARY

# Written by moby/spdystream v0.5.1's spdy.Framer (Go): SYN_STREAM 1 {streamtype: error},
# SYN_STREAM 3 {streamtype: stdin}, DATA 3 "hello" FIN, PING 1,
# SYN_STREAM 5 {streamtype: data, port: 8080, requestid: 0}; one zlib context throughout.
GO_FRAMES = bytes.fromhex(
    "80030001000000290000000100000000000078f9e3c6a7c26260606004a7b392a2d4c45c6851c29a0a0a"
    "6800000000ffff800300010000001700000003000000000000c22e555c92929907000000ffff00000003"
    "0100000568656c6c6f800300060000000400000001800300010000002f00000005000000000000022555"
    "0c295001940829cb8bc0d9c6c2c0c280818181b30812f799a03cc16800000000ffff"
)


def control(frame_type: int, body: bytes, flags: int = 0, version: int = 3) -> bytes:
    return struct.pack(">HHI", 0x8000 | version, frame_type, flags << 24 | len(body)) + body


def data(stream_id: int, payload: bytes, flags: int = 0) -> bytes:
    return struct.pack(">II", stream_id, flags << 24 | len(payload)) + payload


def raw_block(*pairs: tuple[bytes, bytes]) -> bytes:
    out = struct.pack(">I", len(pairs))
    for name, value in pairs:
        out += struct.pack(">I", len(name)) + name + struct.pack(">I", len(value)) + value
    return out


def compress_blocks(*blocks: bytes) -> list[bytes]:
    z = zlib.compressobj(zdict=SPDY3_DICTIONARY)
    return [z.compress(b) + z.flush(zlib.Z_SYNC_FLUSH) for b in blocks]


def syn_stream(stream_id: int, compressed: bytes, flags: int = 0) -> bytes:
    return control(1, struct.pack(">IIBB", stream_id, 0, 0, 0) + compressed, flags)


def open_pair() -> tuple[SpdyConnection, SpdyConnection]:
    return SpdyConnection(client_side=True), SpdyConnection()


def transfer(src: SpdyConnection, dst: SpdyConnection) -> list[Event]:
    return dst.receive_data(src.data_to_send())


def server_with_stream(headers: dict[str, str] | None = None) -> tuple[SpdyConnection, int]:
    client, server = open_pair()
    sid = client.open_stream(headers or {"streamtype": "stdin"})
    transfer(client, server)
    return server, sid


# --- the dictionary ---------------------------------------------------------------------


def test_dictionary_is_the_spdy3_constant() -> None:
    assert len(SPDY3_DICTIONARY) == 1423
    assert (
        hashlib.sha256(SPDY3_DICTIONARY).hexdigest()
        == "51d27341373f923f3cd88e1eb7162aeaa3723d7585ff2399201dc06498407f02"
    )
    assert SPDY3_DICTIONARY.startswith(b"\x00\x00\x00\x07options")
    assert SPDY3_DICTIONARY.endswith(b"enq=0.")


def test_go_written_frames_decode() -> None:
    server = SpdyConnection()
    events = server.receive_data(GO_FRAMES)
    assert events == [
        StreamOpened(1, {"streamtype": "error"}),
        StreamOpened(3, {"streamtype": "stdin"}),
        DataReceived(3, b"hello", fin=True),
        PingReceived(1),
        StreamOpened(5, {"streamtype": "data", "port": "8080", "requestid": "0"}),
    ]
    assert server.data_to_send() == bytes.fromhex("80030006 00000004 00000001")


def test_go_written_frames_one_byte_at_a_time() -> None:
    server = SpdyConnection()
    events: list[Event] = []
    for i in range(len(GO_FRAMES)):
        events += server.receive_data(GO_FRAMES[i : i + 1])
    opened = [e.stream_id for e in events if isinstance(e, StreamOpened)]
    assert opened == [1, 3, 5]
    chunks = [e for e in events if isinstance(e, DataReceived)]
    assert b"".join(c.data for c in chunks) == b"hello"
    assert [c.fin for c in chunks] == [False] * 4 + [True]
    assert server.buffered_bytes == 0


# --- outbound frames, byte-exact ----------------------------------------------------------


def test_reply_frame_layout_and_empty_block() -> None:
    server, sid = server_with_stream()
    server.reply(sid)
    out = server.data_to_send()
    assert out[:4] == bytes.fromhex("80030002")
    assert out[4] == 0 and int.from_bytes(out[5:8], "big") == len(out) - 8
    assert out[8:12] == struct.pack(">I", sid)
    z = zlib.decompressobj(zdict=SPDY3_DICTIONARY)
    assert z.decompress(out[12:]) == b"\x00\x00\x00\x00"


def test_reply_with_fin_sets_flag() -> None:
    server, sid = server_with_stream()
    server.reply(sid, fin=True)
    assert server.data_to_send()[4] == 0x01
    assert not server.can_send(sid)


def test_data_rst_goaway_ping_bytes() -> None:
    server, sid = server_with_stream()
    server.reply(sid)
    server.data_to_send()
    server.send_data(sid, b"abc")
    assert server.data_to_send() == data(1, b"abc")
    server.send_data(sid, b"", fin=True)
    assert server.data_to_send() == bytes.fromhex("00000001 01000000")
    server.reset(7, RstStatus.CANCEL)
    assert server.data_to_send() == bytes.fromhex("80030003 00000008 00000007 00000005")
    assert server.ping() == 2
    assert server.ping() == 4
    assert server.data_to_send() == bytes.fromhex("80030006 00000004 00000002") + bytes.fromhex(
        "80030006 00000004 00000004"
    )
    server.goaway()
    server.goaway()  # only once
    assert server.data_to_send() == bytes.fromhex("80030007 00000008 00000001 00000000")


def test_send_data_splits_at_32k_with_fin_on_last() -> None:
    server, sid = server_with_stream()
    server.reply(sid)
    server.data_to_send()
    payload = bytes(range(256)) * 400  # 102400 bytes
    server.send_data(sid, payload, fin=True)
    out = server.data_to_send()
    frames = []
    pos = 0
    while pos < len(out):
        head, word = struct.unpack_from(">II", out, pos)
        length = word & 0xFFFFFF
        frames.append((head, word >> 24, out[pos + 8 : pos + 8 + length]))
        pos += 8 + length
    assert [len(f[2]) for f in frames] == [32768, 32768, 32768, 4096]
    assert [f[1] for f in frames] == [0, 0, 0, 1]
    assert all(f[0] == sid for f in frames)
    assert b"".join(f[2] for f in frames) == payload


def test_send_data_empty_without_fin_sends_nothing() -> None:
    server, sid = server_with_stream()
    server.reply(sid)
    server.data_to_send()
    server.send_data(sid, b"")
    assert server.data_to_send() == b""


def test_syn_stream_layout_from_client() -> None:
    client = SpdyConnection(client_side=True)
    assert client.open_stream({"streamtype": "error"}) == 1
    assert client.open_stream({"streamtype": "stdin"}, fin=True) == 3
    out = client.data_to_send()
    first_len = int.from_bytes(out[5:8], "big")
    assert out[:5] == bytes.fromhex("8003000100")
    assert out[8:18] == bytes.fromhex("00000001 00000000 0000")
    second = out[8 + first_len :]
    assert second[:5] == bytes.fromhex("8003000101")
    assert second[8:12] == bytes.fromhex("00000003")


# --- header blocks ---------------------------------------------------------------------


def test_header_context_is_shared_across_blocks() -> None:
    client = SpdyConnection(client_side=True)
    for kind in ("error", "stdin", "stdout"):
        client.open_stream({"streamtype": kind, "requestid": "0"})
    out = client.data_to_send()
    blocks = []
    pos = 0
    while pos < len(out):
        length = int.from_bytes(out[pos + 5 : pos + 8], "big")
        blocks.append(out[pos + 18 : pos + 8 + length])
        pos += 8 + length
    shared = zlib.decompressobj(zdict=SPDY3_DICTIONARY)
    decoded = [decode_header_block(shared.decompress(b)) for b in blocks]
    assert [d["streamtype"] for d in decoded] == ["error", "stdin", "stdout"]
    fresh = zlib.decompressobj(zdict=SPDY3_DICTIONARY)
    with pytest.raises(zlib.error):
        fresh.decompress(blocks[1])
    assert len(blocks[2]) < len(blocks[0])


def test_names_are_lowercased_and_lists_nul_joined() -> None:
    block = encode_header_block({"StreamType": "stdin", "X-Multi": ["a", "b"]})
    assert block == raw_block((b"streamtype", b"stdin"), (b"x-multi", b"a\x00b"))
    decoded = decode_header_block(block)
    assert header_values(decoded["x-multi"]) == ["a", "b"]


def test_inbound_uppercase_names_are_lowercased_and_merged() -> None:
    (compressed,) = compress_blocks(raw_block((b"StreamType", b"data"), (b"streamtype", b"x")))
    events = SpdyConnection().receive_data(syn_stream(1, compressed))
    assert events == [StreamOpened(1, {"streamtype": "data\x00x"})]


def test_empty_header_name_rejected() -> None:
    with pytest.raises(ValueError):
        encode_header_block({"": "x"})
    with pytest.raises(ProtocolError) as info:
        decode_header_block(raw_block((b"", b"x")))
    assert info.value.violation is Violation.BAD_HEADER_BLOCK


@pytest.mark.parametrize(
    "block",
    [
        b"\x00\x00",
        raw_block((b"a", b"b"))[:-1],
        raw_block((b"a", b"b")) + b"\x00",
        struct.pack(">I", 2) + raw_block((b"a", b"b"))[4:],
        struct.pack(">II", 1, 100) + b"abc",
    ],
)
def test_malformed_header_blocks(block: bytes) -> None:
    with pytest.raises(ProtocolError) as info:
        decode_header_block(block)
    assert info.value.violation is Violation.BAD_HEADER_BLOCK


def test_header_count_limit() -> None:
    block = raw_block(*[(f"h{i}".encode(), b"") for i in range(5)])
    with pytest.raises(ProtocolError):
        decode_header_block(block, max_count=4)
    assert len(decode_header_block(block, max_count=5)) == 5


def test_decompression_bomb_is_bounded() -> None:
    bomb = raw_block((b"x", b"\x00" * (2 * 1024 * 1024)))
    (compressed,) = compress_blocks(bomb)
    assert len(compressed) < 8 * 1024
    with pytest.raises(ProtocolError) as info:
        SpdyConnection().receive_data(syn_stream(1, compressed))
    assert info.value.violation is Violation.HEADER_BLOCK_TOO_LARGE


def test_garbage_compression_is_a_protocol_error() -> None:
    with pytest.raises(ProtocolError) as info:
        SpdyConnection().receive_data(syn_stream(1, b"\x01\x02\x03\x04"))
    assert info.value.violation is Violation.BAD_COMPRESSION


def test_zlib_stream_end_is_rejected() -> None:
    z = zlib.compressobj(zdict=SPDY3_DICTIONARY)
    finished = z.compress(raw_block((b"a", b"b"))) + z.flush()
    with pytest.raises(ProtocolError) as info:
        SpdyConnection().receive_data(syn_stream(1, finished))
    assert info.value.violation is Violation.BAD_COMPRESSION


# --- pings, goaway, settings, window updates ----------------------------------------------------


def test_ping_parity() -> None:
    server = SpdyConnection()
    assert server.receive_data(control(6, struct.pack(">I", 7))) == [PingReceived(7)]
    assert server.data_to_send() == control(6, struct.pack(">I", 7))
    assert server.receive_data(control(6, struct.pack(">I", 2))) == [PingAcknowledged(2)]
    assert server.data_to_send() == b""
    client = SpdyConnection(client_side=True)
    assert client.receive_data(control(6, struct.pack(">I", 2))) == [PingReceived(2)]
    assert client.data_to_send() == control(6, struct.pack(">I", 2))


def test_ping_round_trip_between_codecs() -> None:
    client, server = open_pair()
    ping_id = client.ping()
    assert transfer(client, server) == [PingReceived(ping_id)]
    assert transfer(server, client) == [PingAcknowledged(ping_id)]


def test_goaway_received_blocks_new_streams() -> None:
    client = SpdyConnection(client_side=True)
    events = client.receive_data(control(7, struct.pack(">II", 5, 0)))
    assert events == [GoAwayReceived(5, 0)]
    assert client.goaway_received
    with pytest.raises(ConnectionClosedError):
        client.open_stream({"a": "b"})


def test_goaway_sent_ignores_new_streams_and_reports_last_good() -> None:
    client, server = open_pair()
    client.open_stream({"streamtype": "error"})
    client.open_stream({"streamtype": "stdin"})
    transfer(client, server)
    server.goaway()
    assert server.data_to_send() == control(7, struct.pack(">II", 3, 0))
    client.open_stream({"streamtype": "late"})
    assert transfer(client, server) == []
    assert server.data_to_send() == b""


def test_settings_and_window_update_are_reported_and_not_answered() -> None:
    server = SpdyConnection()
    body = struct.pack(">IIIII", 2, 0x01000004, 100, 7, 65536)
    events = server.receive_data(control(4, body, flags=1) + control(9, struct.pack(">II", 1, 10)))
    assert events == [
        SettingsReceived({4: 100, 7: 65536}, clear_persisted=True),
        WindowUpdateReceived(1, 10),
    ]
    assert server.data_to_send() == b""


def test_unknown_control_frames_are_skipped_even_when_large() -> None:
    server = SpdyConnection(limits=SpdyLimits(max_control_frame=64))
    stream = control(10, b"\xaa" * 5000) + control(6, struct.pack(">I", 1))
    events: list[Event] = []
    for i in range(0, len(stream), 7):
        events += server.receive_data(stream[i : i + 7])
        assert server.buffered_bytes < 16
    assert events == [PingReceived(1)]


def test_empty_unknown_control_frame_does_not_stall() -> None:
    server = SpdyConnection()
    assert server.receive_data(control(10, b"") + control(6, struct.pack(">I", 1))) == [
        PingReceived(1)
    ]


# --- stream state ------------------------------------------------------------------------


def test_stream_lifecycle_and_forgetting() -> None:
    client, server = open_pair()
    sid = client.open_stream({"streamtype": "stdin"})
    assert transfer(client, server) == [StreamOpened(sid, {"streamtype": "stdin"})]
    server.reply(sid, {"X-Reply": "yes"})
    assert transfer(server, client) == [StreamReplied(sid, {"x-reply": "yes"})]
    client.send_data(sid, b"in", fin=True)
    assert transfer(client, server) == [DataReceived(sid, b"in", fin=True)]
    assert not server.can_receive(sid) and server.can_send(sid)
    server.send_data(sid, b"out", fin=True)
    assert transfer(server, client) == [DataReceived(sid, b"out", fin=True)]
    assert server.open_stream_ids == frozenset() == client.open_stream_ids


def test_data_after_fin_and_for_unknown_streams_is_ignored() -> None:
    server, sid = server_with_stream()
    assert server.receive_data(data(sid, b"x", flags=1)) == [DataReceived(sid, b"x", True)]
    assert server.receive_data(data(sid, b"late")) == []
    assert server.receive_data(data(99, b"nobody")) == []
    assert server.receive_data(data(sid, b"", flags=1)) == []


def test_headers_frame_on_open_stream() -> None:
    client, server = open_pair()
    sid = client.open_stream({"a": "1"})
    transfer(client, server)
    client.send_headers(sid, {"b": "2"}, fin=True)
    assert transfer(client, server) == [HeadersReceived(sid, {"b": "2"}, fin=True)]
    assert not server.can_receive(sid)


def test_peer_reset_closes_both_directions() -> None:
    server, sid = server_with_stream()
    assert server.receive_data(control(3, struct.pack(">II", sid, 5))) == [StreamReset(sid, 5)]
    with pytest.raises(StreamClosedError):
        server.send_data(sid, b"x")
    assert server.receive_data(data(sid, b"x")) == []
    assert server.receive_data(control(3, struct.pack(">II", sid, 5))) == []


def test_local_misuse_raises_typed_errors() -> None:
    server, sid = server_with_stream()
    with pytest.raises(StreamStateError):
        server.send_data(sid, b"before the reply")
    with pytest.raises(StreamStateError):
        server.send_headers(sid, {"a": "b"})
    server.reply(sid)
    with pytest.raises(StreamStateError):
        server.reply(sid)
    server.send_data(sid, b"", fin=True)
    with pytest.raises(StreamClosedError):
        server.send_data(sid, b"more")
    with pytest.raises(StreamClosedError):
        server.reply(42)
    with pytest.raises(ValueError):
        server.reset(0)


def test_local_reset_drops_a_data_frame_in_flight() -> None:
    server, sid = server_with_stream()
    frame = data(sid, b"abcdef", flags=1)
    assert server.receive_data(frame[:10]) == [DataReceived(sid, b"ab")]
    server.reset(sid)
    assert server.receive_data(frame[10:]) == []


def test_unidirectional_stream_cannot_be_answered() -> None:
    (compressed,) = compress_blocks(raw_block((b"a", b"b")))
    server = SpdyConnection()
    events = server.receive_data(syn_stream(1, compressed, flags=0x02))
    assert events == [StreamOpened(1, {"a": "b"}, unidirectional=True)]
    assert not server.can_send(1) and server.can_receive(1)


def test_bad_stream_ids_are_reset_but_keep_the_zlib_context() -> None:
    blocks = compress_blocks(*(raw_block((b"n", str(i).encode())) for i in range(4)))
    server = SpdyConnection()
    assert server.receive_data(syn_stream(3, blocks[0])) == [StreamOpened(3, {"n": "0"})]
    assert server.receive_data(syn_stream(2, blocks[1])) == []  # server-parity id
    assert server.data_to_send() == control(3, struct.pack(">II", 2, 1))
    # reusing a live id: the peer's stream dies with it
    assert server.receive_data(syn_stream(3, blocks[2])) == [StreamReset(3, 1)]
    assert server.data_to_send() == control(3, struct.pack(">II", 3, 1))
    assert server.receive_data(syn_stream(5, blocks[3])) == [StreamOpened(5, {"n": "3"})]


def test_open_stream_limit_refuses() -> None:
    blocks = compress_blocks(*(raw_block((b"n", b"x")) for _ in range(3)))
    server = SpdyConnection(limits=SpdyLimits(max_open_streams=2))
    events = server.receive_data(b"".join(syn_stream(2 * i + 1, b) for i, b in enumerate(blocks)))
    assert [e.stream_id for e in events if isinstance(e, StreamOpened)] == [1, 3]
    assert server.data_to_send() == control(3, struct.pack(">II", 5, RstStatus.REFUSED_STREAM))
    assert server.last_peer_stream_id == 5


def test_big_data_frame_is_streamed_not_buffered() -> None:
    server, sid = server_with_stream()
    payload = b"z" * (3 * 1024 * 1024)
    frame = data(sid, payload, flags=1)
    got = bytearray()
    for i in range(0, len(frame), 65536):
        for event in server.receive_data(frame[i : i + 65536]):
            assert isinstance(event, DataReceived)
            got += event.data
        assert server.buffered_bytes == 0
    assert bytes(got) == payload


# --- protocol errors ---------------------------------------------------------------------


@pytest.mark.parametrize(
    ("stream", "violation"),
    [
        (control(6, struct.pack(">I", 1), version=2), Violation.UNSUPPORTED_VERSION),
        (data(0, b"x"), Violation.ZERO_STREAM_ID),
        (control(6, b"\x00\x00\x00"), Violation.BAD_FRAME),
        (control(3, struct.pack(">II", 1, 0)), Violation.BAD_FRAME),
        (control(3, struct.pack(">II", 0, 1)), Violation.ZERO_STREAM_ID),
        (control(7, struct.pack(">I", 1)), Violation.BAD_FRAME),
        (control(9, struct.pack(">III", 1, 1, 1)), Violation.BAD_FRAME),
        (control(4, struct.pack(">III", 2, 1, 1)), Violation.BAD_FRAME),
        (control(1, b"\x00" * 9), Violation.BAD_FRAME),
        (control(2, b"\x00" * 3), Violation.BAD_FRAME),
    ],
)
def test_protocol_errors(stream: bytes, violation: Violation) -> None:
    with pytest.raises(ProtocolError) as info:
        SpdyConnection().receive_data(stream)
    assert info.value.violation is violation


def test_control_frame_too_large_fails_before_the_body_arrives() -> None:
    server = SpdyConnection(limits=SpdyLimits(max_control_frame=1024))
    header = struct.pack(">HHI", 0x8003, 1, 1025)
    with pytest.raises(ProtocolError) as info:
        server.receive_data(header)
    assert info.value.violation is Violation.FRAME_TOO_LARGE


def test_errors_are_sticky_and_queue_goaway() -> None:
    server, _ = server_with_stream()
    with pytest.raises(ProtocolError) as first:
        server.receive_data(data(0, b""))
    assert server.data_to_send() == control(7, struct.pack(">II", 1, 1))
    with pytest.raises(ProtocolError) as again:
        server.receive_data(control(6, struct.pack(">I", 1)))
    assert again.value is first.value
    assert server.buffered_bytes == 0


# --- properties ------------------------------------------------------------------------

names = st.text(alphabet="abcdefghijklmnopqrstuvwxyz0123456789-", min_size=1, max_size=20)
values = st.text(max_size=40)
header_maps = st.dictionaries(names, values, max_size=8)


@given(header_maps)
def test_header_block_round_trip(headers: dict[str, str]) -> None:
    assert decode_header_block(encode_header_block(headers)) == headers


@given(st.lists(header_maps, min_size=1, max_size=12))
def test_many_blocks_share_one_context(blocks: list[dict[str, str]]) -> None:
    compressor, decompressor = HeaderCompressor(), HeaderDecompressor()
    for headers in blocks:
        assert decompressor.decompress(compressor.compress(headers)) == headers


@settings(max_examples=60, deadline=None)
@given(
    st.lists(
        st.tuples(st.integers(0, 2), st.binary(max_size=70_000), st.booleans()),
        min_size=1,
        max_size=8,
    ),
    st.lists(st.integers(1, 5000), min_size=1, max_size=20),
)
def test_data_survives_any_fragmentation(
    writes: list[tuple[int, bytes, bool]], cuts: list[int]
) -> None:
    client, server = open_pair()
    sids = [client.open_stream({"streamtype": str(i)}) for i in range(3)]
    expected = {sid: b"" for sid in sids}
    finished: set[int] = set()
    for index, payload, fin in writes:
        sid = sids[index]
        if sid in finished:
            continue
        client.send_data(sid, payload, fin=fin)
        expected[sid] += payload
        if fin:
            finished.add(sid)
    wire = client.data_to_send()
    received = {sid: b"" for sid in sids}
    fins: set[int] = set()
    pos, i = 0, 0
    while pos < len(wire):
        step = cuts[i % len(cuts)]
        for event in server.receive_data(wire[pos : pos + step]):
            if isinstance(event, DataReceived):
                received[event.stream_id] += event.data
                if event.fin:
                    fins.add(event.stream_id)
        pos += step
        i += 1
    assert received == expected
    assert fins == finished
    assert server.buffered_bytes < 8 + 1024
