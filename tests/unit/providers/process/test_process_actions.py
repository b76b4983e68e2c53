"""What a pod prints costs vkpy a bounded amount of memory, however much it prints.

A probe or hook is the pod's code, run by vkpy every period: the kubelet caps an exec
probe's output while reading it, and so does vkpy. The command runs through the
real exec helper in an instance directory (as in test_process_streams), and vkpy's
own allocations are measured with tracemalloc while it prints 200 MB. Logs are read
in batches, keeping only the lines asked for.
"""

from __future__ import annotations

import asyncio
import os
import sys
import tracemalloc
from pathlib import Path

import pytest

from tests.unit.providers.process.test_process_provider import REF, container, make, pod
from vkpy.providers.base import LogQuery
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


def _ends_with(path: Path, tail: bytes) -> bool:
    with path.open("rb") as handle:
        handle.seek(max(0, path.stat().st_size - len(tail)))
        return handle.read() == tail


async def test_reading_a_big_log_holds_only_what_is_asked_for(tmp_path: Path) -> None:
    """`kubectl logs --tail` and a plain `kubectl logs` of a container that printed
    100,000 lines (4 MB of log): vkpy holds a batch and the tail, not the file."""
    provider = make(tmp_path)
    await provider.start()
    try:
        await provider.create_pod(pod(container("app", "seq 1 100000; sleep 60")))
        log = tmp_path / "process/pods" / REF.uid / "containers/app/instances/0/output.log"
        for _ in range(1200):
            if log.exists() and _ends_with(log, b" stdout F 100000\n"):
                break
            await asyncio.sleep(0.05)
        tracemalloc.start()
        try:
            tail = LogQuery("app", tail_lines=3)
            last = [r.data async for r in provider.container_logs(REF, tail)]
            _, tail_peak = tracemalloc.get_traced_memory()
            tracemalloc.reset_peak()
            lines = 0  # a line the container wrote in two pieces is two records
            async for record in provider.container_logs(REF, LogQuery("app")):
                lines += record.data.count(b"\n")
            _, all_peak = tracemalloc.get_traced_memory()
        finally:
            tracemalloc.stop()
        assert last == [b"99998\n", b"99999\n", b"100000\n"]
        assert lines == 100000
        assert tail_peak < 8 * 2**20, f"tail: peak {tail_peak / 2**20:.1f} MiB"
        assert all_peak < 8 * 2**20, f"all: peak {all_peak / 2**20:.1f} MiB"
    finally:
        await provider.delete_pod(REF, 0)
        await provider.close()
