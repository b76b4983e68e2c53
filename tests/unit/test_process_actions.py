"""Exec handlers of probes and hooks read at most what they keep of a command's output.

A probe or hook is the pod's code, run by vkpy every period: whatever it prints must
cost vkpy a bounded amount of memory, as on the kubelet, which caps an exec probe's
output while reading it. The command runs through the real exec helper in an
instance directory (as in test_process_streams), and vkpy's own allocations are
measured with tracemalloc while it prints 200 MB.
"""

from __future__ import annotations

import os
import sys
import tracemalloc
from pathlib import Path

import pytest

from vkpy.providers.process.actions import OUTPUT_LIMIT, Actions
from vkpy.providers.process.layout import InstanceDir, write_json
from vkpy.providers.process.records import ProcessContext

HUGE = 200 * 1000 * 1000


@pytest.fixture
def instance(tmp_path: Path) -> InstanceDir:
    path = tmp_path / "instance"
    path.mkdir()
    context = ProcessContext(env=(("PATH", os.environ.get("PATH", "/usr/bin:/bin")),), cwd="/")
    write_json(path / "spec.json", {"context": context.to_dict()})
    return InstanceDir(path, 0)


async def test_a_probe_printing_200_mb_costs_vkpy_no_more_than_a_little(
    instance: InstanceDir,
) -> None:
    actions = Actions(sys.executable, "127.0.0.1")
    command = ["sh", "-c", f"head -c {HUGE} /dev/zero | tr '\\0' x; exit 3"]
    tracemalloc.start()
    try:
        outcome = await actions.exec(command, instance, timeout=120)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert not outcome.ok
    assert outcome.message == "x" * OUTPUT_LIMIT
    assert peak < 4 * 2**20, f"peak {peak / 2**20:.1f} MiB of Python allocations"


async def test_output_is_kept_whole_below_the_limit(instance: InstanceDir) -> None:
    actions = Actions(sys.executable, "127.0.0.1")
    outcome = await actions.exec(["sh", "-c", "echo fine; echo on stderr >&2"], instance, 10)
    assert outcome.ok
    assert outcome.message == "fine\non stderr\n"
    failed = await actions.exec(["false"], instance, 10)
    assert not failed.ok and failed.message == "command exited with 1"
