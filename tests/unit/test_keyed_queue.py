"""Per-key serialization, coalescing and retry of the pod work queue."""

import asyncio

from vkpy.node.keyed_queue import KeyedQueue, Retry


async def test_one_key_never_runs_twice_at_once_and_changes_coalesce() -> None:
    running: set[str] = set()
    overlaps = 0
    calls: list[str] = []

    async def handler(key: str) -> None:
        nonlocal overlaps
        if key in running:
            overlaps += 1
        running.add(key)
        calls.append(key)
        await asyncio.sleep(0.05)
        running.discard(key)

    queue = KeyedQueue(handler, workers=4)
    task = asyncio.create_task(queue.run())
    for _ in range(10):
        queue.add("a")
    queue.add("b")
    await asyncio.sleep(0.01)
    for _ in range(10):
        queue.add("a")  # while "a" runs: exactly one more run
    await asyncio.sleep(0.3)
    task.cancel()
    assert overlaps == 0
    assert calls.count("a") == 2
    assert calls.count("b") == 1


async def test_failures_are_retried_with_backoff() -> None:
    attempts = 0

    async def handler(key: str) -> None:
        nonlocal attempts
        attempts += 1
        if attempts < 3:
            raise Retry("not yet")

    queue = KeyedQueue(handler, workers=1, base_backoff=0.01)
    task = asyncio.create_task(queue.run())
    queue.add("k")
    await asyncio.sleep(0.3)
    task.cancel()
    assert attempts == 3
    assert not queue.busy()
