"""Tests for the channel protocols: the WebSocket codec (vkpy.streams.channels) and the
transport-independent exec/attach/port-forward rules (vkpy.streams.remotecommand)."""

from __future__ import annotations

import base64
import contextlib
import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from vkpy.streams import remotecommand as rc
from vkpy.streams.channels import (
    BASE64_CHANNEL_V1,
    BASE64_CHANNEL_V4,
    CHANNEL_V1,
    CHANNEL_V4,
    CHANNEL_V5,
    NO_SUBPROTOCOL,
    PORTFORWARD_PROTOCOLS,
    REMOTECOMMAND_PROTOCOLS,
    Channel,
    ChannelMessage,
    CloseChannel,
    ProtocolError,
    ResizeDecoder,
    TerminalSize,
    decode,
    decode_port_prefix,
    encode,
    encode_close,
    encode_port_prefix,
    encode_resize,
    negotiate,
    port_forward_channels,
    port_forward_index,
    protocol_info,
    split_offered,
)

BINARY = [NO_SUBPROTOCOL, CHANNEL_V1, CHANNEL_V4, CHANNEL_V5]
BASE64 = [BASE64_CHANNEL_V1, BASE64_CHANNEL_V4]

# --- negotiation ---------------------------------------------------------------------------


def test_negotiate_takes_the_clients_first_supported() -> None:
    assert negotiate([CHANNEL_V5, CHANNEL_V4]) == CHANNEL_V5
    assert negotiate(["v9.channel.k8s.io", CHANNEL_V4, CHANNEL_V5]) == CHANNEL_V4
    assert negotiate(["v4.channel.k8s.io, v5.channel.k8s.io"]) == CHANNEL_V4
    assert negotiate([" base64.channel.k8s.io "]) == BASE64_CHANNEL_V1


def test_negotiate_without_offer_and_without_match() -> None:
    assert negotiate([]) == NO_SUBPROTOCOL
    assert negotiate([" , "]) == NO_SUBPROTOCOL
    assert negotiate([], supported=[CHANNEL_V5]) is None
    assert negotiate(["v2.portforward.k8s.io"]) is None
    assert negotiate([CHANNEL_V5], supported=PORTFORWARD_PROTOCOLS) is None
    assert negotiate(["V5.CHANNEL.K8S.IO"]) is None  # case-sensitive, as in Kubernetes


def test_split_offered() -> None:
    assert split_offered(["a, b", "c", ""]) == ["a", "b", "c"]


def test_protocol_info() -> None:
    assert protocol_info(CHANNEL_V5).close_signal
    assert not protocol_info(CHANNEL_V4).close_signal
    assert protocol_info(BASE64_CHANNEL_V4).base64 and protocol_info(BASE64_CHANNEL_V4).status_json
    assert not protocol_info(CHANNEL_V1).status_json
    assert set(REMOTECOMMAND_PROTOCOLS) >= set(PORTFORWARD_PROTOCOLS)
    with pytest.raises(ValueError):
        protocol_info("v2.channel.k8s.io")


# --- messages ------------------------------------------------------------------------------


@pytest.mark.parametrize("protocol", BINARY)
def test_binary_encoding(protocol: str) -> None:
    assert encode(protocol, Channel.STDOUT, b"hi") == b"\x01hi"
    assert decode(protocol, b"\x00input") == ChannelMessage(Channel.STDIN, b"input")
    assert decode(protocol, b"\x04") == ChannelMessage(Channel.RESIZE, b"")


@pytest.mark.parametrize("protocol", BASE64)
def test_base64_encoding(protocol: str) -> None:
    assert encode(protocol, Channel.STDERR, b"server") == "2" + base64.b64encode(b"server").decode()
    assert decode(protocol, "0Y2xpZW50") == ChannelMessage(0, b"client")
    assert decode(protocol, b"0Y2xp\r\nZW50") == ChannelMessage(0, b"client")
    assert decode(protocol, "1") == ChannelMessage(1, b"")


@pytest.mark.parametrize("message", ["0Y2xpZW5", "0Y2x*ZW50", "/AAAA", "\x80AAAA"])
def test_bad_base64_messages(message: str) -> None:
    with pytest.raises(ProtocolError):
        decode(BASE64_CHANNEL_V4, message)


def test_empty_messages_are_ignored() -> None:
    assert decode(CHANNEL_V5, b"") is None
    assert decode(BASE64_CHANNEL_V4, "") is None


def test_v5_close_signal() -> None:
    assert encode_close(CHANNEL_V5, Channel.STDIN) == b"\xff\x00"
    assert decode(CHANNEL_V5, b"\xff\x00") == CloseChannel(0)
    with pytest.raises(ProtocolError):
        decode(CHANNEL_V5, b"\xff")
    with pytest.raises(ProtocolError):
        decode(CHANNEL_V5, b"\xff\x00\x01")
    with pytest.raises(ValueError):
        encode_close(CHANNEL_V4, 0)
    with pytest.raises(ValueError):
        encode(CHANNEL_V5, 255, b"")
    # before v5, 255 is just a channel number
    assert decode(CHANNEL_V4, b"\xff\x00") == ChannelMessage(255, b"\x00")


def test_channel_range_checks() -> None:
    with pytest.raises(ValueError):
        encode(CHANNEL_V4, 256, b"")
    with pytest.raises(ValueError):
        encode(BASE64_CHANNEL_V4, 80, b"")
    assert encode(BASE64_CHANNEL_V4, 10, b"") == ":"


@given(
    st.sampled_from(BINARY + BASE64),
    st.integers(0, 79),
    st.binary(max_size=2048),
)
def test_message_round_trip(protocol: str, channel: int, data: bytes) -> None:
    message = encode(protocol, channel, data)
    assert isinstance(message, str) == protocol_info(protocol).base64
    assert decode(protocol, message) == ChannelMessage(channel, data)


@given(st.sampled_from(BINARY + BASE64), st.binary(max_size=256) | st.text(max_size=64))
def test_decode_never_fails_unexpectedly(protocol: str, message: bytes | str) -> None:
    with contextlib.suppress(ProtocolError):
        decode(protocol, message)


# --- port-forward --------------------------------------------------------------------------


def test_port_forward_channels_and_prefix() -> None:
    assert port_forward_channels(0) == (0, 1)
    assert port_forward_channels(2) == (4, 5)
    assert port_forward_index(5) == (2, True)
    assert port_forward_index(4) == (2, False)
    assert encode_port_prefix(8080) == b"\x90\x1f"
    assert decode_port_prefix(b"\x90\x1frest") == (8080, b"rest")
    message = encode(CHANNEL_V4, 2, encode_port_prefix(443))
    assert message == b"\x02\xbb\x01"
    with pytest.raises(ProtocolError):
        decode_port_prefix(b"\x01")
    with pytest.raises(ValueError):
        encode_port_prefix(0)
    with pytest.raises(ValueError):
        port_forward_channels(-1)


# --- resize --------------------------------------------------------------------------------


def test_resize_stream_as_client_go_writes_it() -> None:
    decoder = ResizeDecoder()
    stream = encode_resize(80, 24) + encode_resize(120, 40)
    assert stream == b'{"Width":80,"Height":24}\n{"Width":120,"Height":40}\n'
    assert decoder.feed(stream) == [(80, 24), (120, 40)]
    assert decoder.pending == 0


def test_resize_one_byte_at_a_time() -> None:
    decoder = ResizeDecoder()
    stream = b'  {"Width":1,"Height":2}{"height":3, "WIDTH":4, "x":{"y":"}"}}\n'
    sizes = []
    for i in range(len(stream)):
        sizes += decoder.feed(stream[i : i + 1])
    assert sizes == [TerminalSize(1, 2), TerminalSize(4, 3)]


def test_resize_defaults_and_nulls() -> None:
    assert ResizeDecoder().feed(b'{"Width":null}{}') == [(0, 0), (0, 0)]


@pytest.mark.parametrize(
    "garbage",
    [
        b"[1,2]",
        b"42\n",
        b'{"Width":-1}',
        b'{"Width":65536}',
        b'{"Width":80.0}',
        b'{"Width":true}',
        b'{"Width":"80"}',
        b'{"Width":NaN}',
        b'{"Width":80,}',
        b'{"Width":\xff}',
        b"{" * 40,
    ],
)
def test_resize_garbage_is_rejected(garbage: bytes) -> None:
    decoder = ResizeDecoder()
    with pytest.raises(ProtocolError):
        decoder.feed(garbage)
    with pytest.raises(ProtocolError):  # sticky
        decoder.feed(encode_resize(1, 1))


def test_resize_pending_is_bounded() -> None:
    decoder = ResizeDecoder(max_object=64)
    decoder.feed(b'{"Width":1,"pad":"' + b"x" * 40)
    with pytest.raises(ProtocolError):
        decoder.feed(b"x" * 40)


@given(st.lists(st.tuples(st.integers(0, 65535), st.integers(0, 65535)), max_size=20), st.data())
def test_resize_round_trip_any_split(sizes: list[tuple[int, int]], data: st.DataObject) -> None:
    stream = b"".join(encode_resize(w, h) for w, h in sizes)
    cuts = sorted(data.draw(st.lists(st.integers(0, len(stream)), max_size=10)))
    decoder = ResizeDecoder()
    got: list[TerminalSize] = []
    for start, end in zip([0, *cuts], [*cuts, len(stream)], strict=True):
        got += decoder.feed(stream[start:end])
    assert got == sizes


@given(st.binary(max_size=512))
def test_resize_decoder_never_fails_unexpectedly(data: bytes) -> None:
    with contextlib.suppress(ProtocolError):
        ResizeDecoder(max_object=256).feed(data)


# --- remotecommand: negotiation and streams ---------------------------------------------------


def test_spdy_negotiation_follows_the_client() -> None:
    offered = ["v5.channel.k8s.io", "v4.channel.k8s.io", "v3.channel.k8s.io"]
    assert rc.negotiate(offered) == rc.PROTOCOL_V5
    assert rc.negotiate(["v4.channel.k8s.io,v5.channel.k8s.io"]) == rc.PROTOCOL_V4
    assert rc.negotiate(["v9.channel.k8s.io", "channel.k8s.io"]) == rc.PROTOCOL_V1
    assert rc.negotiate(["v9.channel.k8s.io"]) is None
    assert rc.negotiate([]) is None and split_offered([]) == []
    assert (
        rc.negotiate(["portforward.k8s.io"], rc.SPDY_PORTFORWARD_PROTOCOLS) == "portforward.k8s.io"
    )


def test_stream_options_from_query() -> None:
    opts = rc.StreamOptions.from_query({"input": "1", "output": "1", "error": "1", "tty": "1"})
    assert opts == rc.StreamOptions(stdin=True, stdout=True, stderr=False, tty=True)
    assert opts.expected_streams(rc.PROTOCOL_V4) == {
        rc.StreamType.ERROR,
        rc.StreamType.STDIN,
        rc.StreamType.STDOUT,
        rc.StreamType.RESIZE,
    }
    assert rc.StreamType.RESIZE not in opts.expected_streams(rc.PROTOCOL_V2)
    plain = rc.StreamOptions.from_query({"output": "1", "error": "1"})
    assert plain.expected_streams(rc.PROTOCOL_V5) == {"error", "stdout", "stderr"}
    assert not rc.StreamOptions.from_query({"tty": "1"}).any_io


# --- remotecommand: the error stream -----------------------------------------------------------


def test_status_json_is_byte_exact_for_v4_and_v5() -> None:
    for protocol in (rc.PROTOCOL_V4, rc.PROTOCOL_V5, CHANNEL_V4, BASE64_CHANNEL_V4):
        assert rc.error_stream_payload(protocol, rc.Success()) == (
            b'{"metadata":{},"status":"Success"}'
        )
        assert rc.error_stream_payload(protocol, rc.ExitCode(3)) == (
            b'{"metadata":{},"status":"Failure",'
            b'"message":"command terminated with non-zero exit code: 3",'
            b'"reason":"NonZeroExitCode",'
            b'"details":{"causes":[{"reason":"ExitCode","message":"3"}]}}'
        )
        assert rc.error_stream_payload(protocol, rc.InternalError("no such pod")) == (
            b'{"metadata":{},"status":"Failure","message":"Internal error occurred: no such pod",'
            b'"reason":"InternalError","details":{"causes":[{"message":"no such pod"}]},'
            b'"code":500}'
        )


def test_older_versions_write_text_and_nothing_on_success() -> None:
    for protocol in (rc.PROTOCOL_V1, rc.PROTOCOL_V2, rc.PROTOCOL_V3, BASE64_CHANNEL_V1, ""):
        assert rc.error_stream_payload(protocol, rc.Success()) == b""
        assert rc.error_stream_payload(protocol, rc.ExitCode(2, "exited with 2")) == (
            b"command terminated with non-zero exit code: exited with 2"
        )
        assert rc.error_stream_payload(protocol, rc.InternalError("x")) == (
            b"Internal error occurred: x"
        )


def test_go_json_escapes_like_encoding_json() -> None:
    out = rc.go_json({"message": "a<b>&c\u2028d\u00e9"})
    assert out == '{"message":"a\\u003cb\\u003e\\u0026c\\u2028d\u00e9"}'.encode()
    assert json.loads(out) == {"message": "a<b>&c\u2028d\u00e9"}


# --- remotecommand: port-forward pairing --------------------------------------------------------


def test_port_forward_pairs_by_request_id() -> None:
    pairer = rc.PortForwardPairer()
    assert pairer.add(1, {"streamtype": "error", "port": "80", "requestid": "0"}) is None
    assert pairer.add(5, {"streamtype": "error", "port": "81", "requestid": "1"}) is None
    assert pairer.add(7, {"streamtype": "data", "port": "81", "requestid": "1"}) == (
        rc.PortForwardRequest("1", 81, data_stream=7, error_stream=5)
    )
    assert pairer.add(3, {"streamtype": "data", "port": "80", "requestid": "0"}) == (
        rc.PortForwardRequest("0", 80, data_stream=3, error_stream=1)
    )
    assert pairer.pending == frozenset()


def test_port_forward_legacy_pairing_without_request_id() -> None:
    pairer = rc.PortForwardPairer()
    assert pairer.add(1, {"streamtype": "error", "port": "8080"}) is None
    assert pairer.add(3, {"streamtype": "data", "port": "8080"}) == (
        rc.PortForwardRequest("1", 8080, data_stream=3, error_stream=1)
    )


@pytest.mark.parametrize(
    "second",
    [
        {"streamtype": "error", "requestid": "0"},
        {"streamtype": "stdout", "requestid": "0"},
    ],
)
def test_port_forward_rejects_bad_streams(second: dict[str, str]) -> None:
    pairer = rc.PortForwardPairer()
    pairer.add(1, {"streamtype": "error", "requestid": "0"})
    with pytest.raises(rc.PortForwardStreamError) as info:
        pairer.add(3, second)
    assert info.value.request_id == "0"


@pytest.mark.parametrize("port", [None, "", "0", "65536", "-1", "8o", "\u0661"])
def test_port_forward_rejects_bad_ports(port: str | None) -> None:
    headers = {"streamtype": "data", "requestid": "7"}
    if port is not None:
        headers["port"] = port
    pairer = rc.PortForwardPairer()
    pairer.add(1, {"streamtype": "error", "requestid": "7"})
    with pytest.raises(rc.PortForwardStreamError):
        pairer.add(3, headers)


def test_port_forward_pending_is_bounded_and_discardable() -> None:
    pairer = rc.PortForwardPairer(max_pending=2)
    pairer.add(1, {"streamtype": "error", "requestid": "a"})
    pairer.add(3, {"streamtype": "error", "requestid": "b"})
    with pytest.raises(rc.PortForwardStreamError):
        pairer.add(5, {"streamtype": "error", "requestid": "c"})
    pairer.discard("a")
    assert pairer.add(5, {"streamtype": "error", "requestid": "c"}) is None
    assert pairer.pending == {"b", "c"}
