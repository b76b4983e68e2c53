"""Hypothesis-driven fuzzing of the SPDY codec on every test run (see tests/fuzz/fuzz_spdy.py).

Random bytes rarely get past the frame header, so most examples start from a valid session
and mutate it: flipped bytes, cut and repeated ranges, and random chunking.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path
from types import ModuleType

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st


def _load_target() -> ModuleType:
    path = Path(__file__).resolve().parents[2] / "fuzz" / "fuzz_spdy.py"
    spec = importlib.util.spec_from_file_location("fuzz_spdy", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


target = _load_target()
SESSIONS = [target.valid_session(True), target.valid_session(False)]
fuzz_settings = settings(
    max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow]
)


@fuzz_settings
@given(st.binary(max_size=4096))
def test_arbitrary_bytes(data: bytes) -> None:
    target.check_input(data)


@st.composite
def mutated_sessions(draw: st.DrawFn) -> bytes:
    session = bytearray(draw(st.sampled_from(SESSIONS)))
    for _ in range(draw(st.integers(0, 6))):
        pos = draw(st.integers(0, len(session) - 1))
        kind = draw(st.sampled_from(["flip", "set", "cut", "dup", "insert"]))
        if kind == "flip":
            session[pos] ^= 1 << draw(st.integers(0, 7))
        elif kind == "set":
            session[pos] = draw(st.sampled_from([0x00, 0x01, 0x7F, 0x80, 0xFF]))
        elif kind == "cut":
            del session[pos : pos + draw(st.integers(1, 64))]
        elif kind == "dup":
            session[pos:pos] = session[pos : pos + draw(st.integers(1, 64))]
        else:
            session[pos:pos] = draw(st.binary(min_size=1, max_size=16))
        if not session:
            break
    return bytes(session)


@fuzz_settings
@given(st.integers(0, 255), mutated_sessions())
def test_mutated_valid_sessions(control: int, session: bytes) -> None:
    target.check_input(bytes([control]) + session)


def test_valid_sessions_pass_cleanly() -> None:
    for control in (0x00, 0x7F, 0x80, 0xFF):
        for session in SESSIONS:
            target.check_input(bytes([control]) + session)
