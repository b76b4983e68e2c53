"""Fixtures shared by the unit tests.

`start` runs the kubelet API's stream handlers on a local TLS server (see
tests/unit/streams_server.py). `no_pending_tasks` is used by every async test: a
test that leaves an asyncio task running (a forgotten worker, an uncancelled
watch) fails, since such a task would keep doing work after the test and hide
leaks in the code under test. kopf's `_no_asyncio_pending_tasks` is the model.
"""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from tests.unit.streams_server import start

__all__ = ["no_pending_tasks", "start"]


_HERE = Path(__file__).parent


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    # The hook sees the whole session's items: only the unit tests get the check.
    for item in items:
        if _HERE not in item.path.parents:
            continue
        function = getattr(item, "function", None)
        if function is not None and inspect.iscoroutinefunction(function):
            fixtures = getattr(item, "fixturenames", None)
            if fixtures is not None and "no_pending_tasks" not in fixtures:
                fixtures.insert(0, "no_pending_tasks")


@pytest.fixture
async def no_pending_tasks() -> AsyncIterator[None]:
    before = asyncio.all_tasks()
    yield
    for _ in range(10):  # let tasks cancelled at the end of the test finish
        await asyncio.sleep(0)
    left = [
        t for t in asyncio.all_tasks() - before if t is not asyncio.current_task() and not t.done()
    ]
    for task in left:
        task.cancel()
    await asyncio.gather(*left, return_exceptions=True)
    if left:
        names = ", ".join(sorted(f"{t.get_name()} ({t.get_coro()!r})" for t in left))
        pytest.fail(f"the test left asyncio tasks pending: {names}")
