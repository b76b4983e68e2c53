"""Fargate's task sizes: the CPU and memory pairs a task may have, and picking one.

Fargate runs a task only at one of a fixed set of CPU/memory combinations, while a
pod asks for any amount. The task gets the cheapest valid size that holds what the
pod's containers ask for (their limits, else requests); when that is more than was
asked, the pod's status says so.
"""

from __future__ import annotations

import math
from collections.abc import Iterator

_TABLE: tuple[tuple[int, range], ...] = (
    (256, range(512, 2049, 512)),
    (512, range(1024, 4097, 1024)),
    (1024, range(2048, 8193, 1024)),
    (2048, range(4096, 16385, 1024)),
    (4096, range(8192, 30721, 1024)),
    (8192, range(16384, 61441, 4096)),
    (16384, range(32768, 122881, 8192)),
)
"""CPU units (1024 = 1 vCPU) and the memory (MiB) each allows (256 allows 512, 1024, 2048)."""
_VCPU_HOUR = 0.04048
_GB_HOUR = 0.004445
"""Relative prices (us-east-1 on demand), only to rank sizes."""

MAX_CPU = 16384
MAX_MEMORY = 122880


def valid_sizes() -> Iterator[tuple[int, int]]:
    for cpu, memories in _TABLE:
        for memory in memories:
            if cpu == 256 and memory == 1536:
                continue  # 0.25 vCPU takes 512 MiB, 1 GB or 2 GB only
            yield cpu, memory


def _cost(size: tuple[int, int]) -> float:
    cpu, memory = size
    return cpu / 1024 * _VCPU_HOUR + memory / 1024 * _GB_HOUR


def fit(cpu_units: float, memory_mib: float) -> tuple[int, int] | None:
    """The cheapest valid (cpu, memory) at least as large as asked; None if none is."""
    need_cpu = math.ceil(cpu_units)
    need_memory = math.ceil(memory_mib)
    fitting = [s for s in valid_sizes() if s[0] >= need_cpu and s[1] >= need_memory]
    if not fitting:
        return None
    return min(fitting, key=lambda s: (_cost(s), s))
