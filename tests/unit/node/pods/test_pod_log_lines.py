"""Log lines per pod at the default level (issue 30).

vkpy logs at `info` unless told otherwise. A pod's ordinary life (bound, created in
the backend, Running, deleted) is in the API server for anyone to see, and a burst of
1000 pods made 2000 info lines there (one when created, one when deleted): formatting
and writing them is work the agent does per pod that kwok and the kubelet at its
default verbosity do not. What is wrong still logs at warning.
"""

from __future__ import annotations

import logging

import pytest

from tests.unit.fake_clock import settle
from tests.unit.pod_harness import Harness
from tests.unit.pod_harness import pod as pod_object
from vkpy.providers.errors import ProviderError

PODS = 20


def lines_at(caplog: pytest.LogCaptureFixture, level: int) -> list[logging.LogRecord]:
    return [r for r in caplog.records if r.levelno >= level and r.name.startswith("vkpy.")]


async def test_an_ordinary_pod_life_writes_no_line_at_the_default_level(
    caplog: pytest.LogCaptureFixture,
) -> None:
    async with Harness() as h:
        await h.start()
        caplog.clear()  # the node's start ("adopted backend pods") is once per node, not per pod
        with caplog.at_level(logging.DEBUG, logger="vkpy"):
            pods = [h.kube.add_pod(pod_object(f"p{n}")) for n in range(PODS)]
            await settle()
            for p in pods:
                assert h.current(p)["status"]["phase"] == "Running"
                h.kube.mark_deleting(p, grace=30)
            await h.clock.advance(1)
            await h.clock.advance(60)
            assert all(h.kube.pod("ns", f"p{n}") is None for n in range(PODS))
        assert lines_at(caplog, logging.INFO) == []
        # still there for whoever asks for debug: one line per pod created and deleted
        debug = [r.getMessage() for r in lines_at(caplog, logging.DEBUG)]
        assert debug.count("pod created in backend") == PODS
        assert debug.count("pod deleted") == PODS


async def test_a_pod_the_backend_refuses_still_logs_at_warning(
    caplog: pytest.LogCaptureFixture,
) -> None:
    async with Harness() as h:
        await h.start()
        h.backend.fail("create", ProviderError("backend down"))
        with caplog.at_level(logging.INFO, logger="vkpy"):
            await h.add("web")
            await h.clock.advance(5)
        assert any(r.levelno >= logging.WARNING for r in lines_at(caplog, logging.INFO))
