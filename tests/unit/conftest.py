"""Fixtures shared by the unit tests: `start` runs the kubelet API's stream handlers on
a local TLS server (see tests/unit/streams_server.py)."""

from tests.unit.streams_server import start

__all__ = ["start"]
