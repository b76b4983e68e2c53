"""Which asyncio event loop runs vkpy: the standard one or uvloop (`--event-loop`).

uvloop (libuv underneath) runs the same asyncio code with cheaper callbacks, sockets
and timers, which shows on a node with thousands of pods or many nodes in one process.
It is an optional extra (`pip install vkpy[uvloop]`), so vkpy works without it; asking
for it when it is not installed is a usage error, not a silent fallback.
"""

from __future__ import annotations

import asyncio
import importlib.util
from collections.abc import Callable

CHOICES = ("auto", "asyncio", "uvloop")
"""`auto`: uvloop when installed, else the standard loop."""


class EventLoopError(Exception):
    """The chosen event loop cannot be had; the message says why."""


def available(name: str) -> bool:
    return name == "asyncio" or importlib.util.find_spec(name) is not None


def resolve(choice: str) -> str:
    """The loop `choice` means here: `asyncio` or `uvloop`."""
    if choice not in CHOICES:
        raise EventLoopError(f"unknown event loop {choice!r}; choose from {', '.join(CHOICES)}")
    if choice == "auto":
        return "uvloop" if available("uvloop") else "asyncio"
    if not available(choice):
        raise EventLoopError(
            f"--event-loop {choice}: {choice} is not installed (pip install 'vkpy[uvloop]')"
        )
    return choice


def loop_factory(name: str) -> Callable[[], asyncio.AbstractEventLoop] | None:
    """What `asyncio.Runner` needs for loop `name` (None: the standard loop)."""
    if name == "uvloop":
        import uvloop  # noqa: PLC0415 - optional

        factory: Callable[[], asyncio.AbstractEventLoop] = uvloop.new_event_loop
        return factory
    return None
