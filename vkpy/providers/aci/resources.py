"""A container's CPU, memory and GPU as ACI takes them.

ACI wants CPU in steps of 0.01 core and memory in steps of 0.1 GB (10^9 bytes), and
every container needs a request. A pod asks in Kubernetes quantities (`250m`,
`1Gi`), possibly without requests; the container gets its requests (else its
limits, else the defaults), rounded up to ACI's steps, and its limits where it has
any. When the result differs from what was asked, a note says so; the pod's status
message and a Warning Event carry it. `nvidia.com/gpu` picks a GPU SKU.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from decimal import Decimal

from vkpy.core.objects import KubeObject
from vkpy.core.quantity import QuantityError, parse_quantity
from vkpy.providers.errors import InvalidInputError

DEFAULT_CPU = Decimal("1")
DEFAULT_MEMORY_GB = Decimal("1.5")
GPU_SKUS = {"K80": (1, 2, 4), "P100": (1, 2, 4), "V100": (1, 2, 4)}
GPU = "nvidia.com/gpu"


def quantity(text: object) -> Decimal:
    """A Kubernetes quantity as a number (`250m` -> 0.25, `1Gi` -> 1073741824)."""
    try:
        return parse_quantity(text if isinstance(text, int | float) else str(text))
    except QuantityError:
        raise InvalidInputError(f"invalid quantity {text!r}", reason="InvalidResources") from None


def _up(value: Decimal, step: Decimal) -> Decimal:
    return (value / step).to_integral_value(rounding="ROUND_CEILING") * step


@dataclass(frozen=True)
class Sizes:
    cpu: float
    memory_gb: float
    cpu_limit: float | None = None
    memory_gb_limit: float | None = None
    gpu: int = 0


def size(container: KubeObject, name: str) -> tuple[Sizes, list[str]]:
    """The container's ACI sizes and notes on what was adjusted."""
    resources = container.get("resources") or {}
    requests = resources.get("requests") or {}
    limits = resources.get("limits") or {}
    notes: list[str] = []

    def pick(key: str) -> Decimal | None:
        raw = requests.get(key, limits.get(key))
        return None if raw is None else quantity(raw)

    cpu = pick("cpu")
    memory = pick("memory")
    if cpu is None:
        cpu = DEFAULT_CPU
        notes.append(f"container {name}: no CPU request, ACI runs it with {DEFAULT_CPU} CPU")
    if memory is None:
        memory_gb = DEFAULT_MEMORY_GB
        notes.append(
            f"container {name}: no memory request, ACI runs it with {DEFAULT_MEMORY_GB} GB"
        )
    else:
        memory_gb = memory / Decimal(10**9)
    cpu_aci = max(_up(cpu, Decimal("0.01")), Decimal("0.01"))
    memory_aci = max(_up(memory_gb, Decimal("0.1")), Decimal("0.1"))
    if cpu_aci != cpu and "cpu" in (requests or limits):
        notes.append(f"container {name}: CPU {cpu.normalize()} rounded up to {cpu_aci} for ACI")
    if memory is not None and memory_aci != memory_gb:
        notes.append(
            f"container {name}: memory {memory_gb.normalize():f} GB rounded up to "
            f"{memory_aci} GB for ACI"
        )
    cpu_limit = memory_limit = None
    if "cpu" in limits:
        cpu_limit = float(max(_up(quantity(limits["cpu"]), Decimal("0.01")), cpu_aci))
    if "memory" in limits:
        limit_gb = quantity(limits["memory"]) / Decimal(10**9)
        memory_limit = float(max(_up(limit_gb, Decimal("0.1")), memory_aci))
    gpu = 0
    if GPU in limits or GPU in requests:
        count = quantity(limits.get(GPU, requests.get(GPU)))
        if count != count.to_integral_value() or count < 0:
            raise InvalidInputError(
                f"container {name}: {GPU} must be a whole number", reason="InvalidResources"
            )
        gpu = math.floor(count)
    return (
        Sizes(float(cpu_aci), float(memory_aci), cpu_limit, memory_limit, gpu),
        notes,
    )


def gpu_sku(count: int, sku: str | None, name: str) -> str:
    """Check the SKU and count ACI allows; the SKU."""
    if sku is None:
        raise InvalidInputError(
            f"container {name} asks for {GPU} but no GPU SKU is set (annotation "
            "vkpy.io/aci-gpu-sku or the node's gpu_sku)",
            reason="InvalidResources",
        )
    counts = GPU_SKUS.get(sku)
    if counts is None:
        raise InvalidInputError(
            f"GPU SKU {sku!r} is not one ACI offers ({', '.join(sorted(GPU_SKUS))})",
            reason="InvalidResources",
        )
    if count not in counts:
        raise InvalidInputError(
            f"container {name}: ACI gives {', '.join(map(str, counts))} GPUs of SKU {sku}, "
            f"not {count}",
            reason="InvalidResources",
        )
    return sku
