"""Flag: an asyncio.Event that stays set, and costs little until somebody waits."""

from __future__ import annotations

import asyncio
import sys

from vkpy.core.flag import Flag


async def test_waiters_wake_when_set_and_later_ones_return_at_once() -> None:
    flag = Flag()
    woken: list[int] = []

    async def waiter(n: int) -> None:
        assert await flag.wait()
        woken.append(n)

    tasks = [asyncio.create_task(waiter(n)) for n in range(3)]
    await asyncio.sleep(0)
    assert not flag.is_set() and woken == []
    flag.set()
    flag.set()  # again: nothing more
    await asyncio.gather(*tasks)
    assert sorted(woken) == [0, 1, 2] and flag.is_set()
    assert await asyncio.wait_for(flag.wait(), 0.01)


async def test_a_cancelled_waiter_leaves_the_others_waiting() -> None:
    flag = Flag()
    gone = asyncio.create_task(flag.wait())
    kept = asyncio.create_task(flag.wait())
    await asyncio.sleep(0)
    gone.cancel()
    await asyncio.sleep(0)
    assert gone.cancelled() and not kept.done()
    flag.set()
    assert await kept


def test_an_unwaited_flag_is_smaller_than_an_event() -> None:
    event = asyncio.Event()
    event_bytes = sys.getsizeof(event) + sys.getsizeof(event.__dict__)
    event_bytes += sum(sys.getsizeof(v) for v in vars(event).values())
    assert sys.getsizeof(Flag()) * 5 < event_bytes, event_bytes
