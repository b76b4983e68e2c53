"""Fuzz target for vkpy.streams.spdy: whatever bytes a peer sends, the codec must either turn
them into events or raise ProtocolError, never another exception, never a stall, and never
buffer more than one control frame.

With atheris installed (``pip install atheris``; it is not a project dependency):

    .venv/bin/python tests/fuzz/fuzz_spdy.py -atheris_runs=200000
    .venv/bin/python tests/fuzz/fuzz_spdy.py CORPUS_DIR -max_total_time=300

``--seed-corpus DIR`` writes a few valid sessions into DIR to start mutating from, and
``--replay FILE...`` runs saved inputs without atheris.  ``tests/unit/streams/test_spdy_fuzz.py``
drives the same ``check_input`` with hypothesis on every test run.
"""

from __future__ import annotations

import importlib
import sys
from pathlib import Path

from vkpy.streams.spdy import (
    DataReceived,
    ProtocolError,
    SpdyConnection,
    SpdyLimits,
    StreamOpened,
)

LIMITS = SpdyLimits(
    max_control_frame=4096, max_header_block=8192, max_header_count=64, max_open_streams=8
)
BUFFER_BOUND = 8 + LIMITS.max_control_frame


def check_input(data: bytes) -> None:
    """Feed ``data`` (first byte: role and chunk size) to a codec and check the invariants."""
    if not data:
        return
    control, payload = data[0], data[1:]
    conn = SpdyConnection(client_side=bool(control & 0x80), limits=LIMITS)
    step = (control & 0x7F) + 1
    try:
        for start in range(0, len(payload), step):
            for event in conn.receive_data(payload[start : start + step]):
                _react(conn, event)
            assert conn.buffered_bytes < BUFFER_BOUND, conn.buffered_bytes
    except ProtocolError:
        assert conn.buffered_bytes == 0
    conn.data_to_send()


def _react(conn: SpdyConnection, event: object) -> None:
    """Answer like the kubelet would, so the send paths see fuzzed state too."""
    if isinstance(event, StreamOpened) and conn.can_send(event.stream_id):
        conn.reply(event.stream_id)
    elif isinstance(event, DataReceived) and conn.can_send(event.stream_id):
        conn.send_data(event.stream_id, event.data, fin=event.fin)


def valid_session(client_side: bool = True) -> bytes:
    """A realistic byte stream from one side: streams, data, ping, settings-free."""
    peer = SpdyConnection(client_side=client_side)
    error = peer.open_stream({"streamtype": "error"})
    stdin = peer.open_stream({"streamtype": "stdin", "X-Multi": ["a", "b"]})
    peer.send_data(error, b"", fin=True)
    peer.ping()
    peer.send_data(stdin, b"hello world" * 10)
    peer.send_headers(stdin, {"late": "1"})
    peer.send_data(stdin, b"", fin=True)
    peer.open_stream({"streamtype": "data", "port": "8080", "requestid": "0"}, fin=True)
    peer.reset(stdin)
    peer.goaway()
    return peer.data_to_send()


def seed_corpus(directory: Path) -> None:
    directory.mkdir(parents=True, exist_ok=True)
    for role, chunk in ((0x00, 0x7F), (0x00, 0x00), (0x80, 0x10)):
        session = valid_session(client_side=not role)
        (directory / f"session-{role:02x}-{chunk:02x}").write_bytes(bytes([role | chunk]) + session)


def main(argv: list[str]) -> None:
    if argv[1:2] == ["--seed-corpus"]:
        seed_corpus(Path(argv[2]))
        return
    if argv[1:2] == ["--replay"]:
        for name in argv[2:]:
            check_input(Path(name).read_bytes())
        return
    atheris = importlib.import_module("atheris")  # optional tool, not a dependency
    atheris.instrument_all()
    atheris.Setup(argv, check_input)
    atheris.Fuzz()


if __name__ == "__main__":
    main(sys.argv)
