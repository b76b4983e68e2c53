"""Kubernetes resource quantities ("500m", "1Gi", "2e3") as exact numbers.

Needed to read container limits (the downward API's resourceFieldRef, backends that
size functions and tasks from them) and to check a provider's capacity settings.
"""

from __future__ import annotations

import re
from decimal import Decimal, InvalidOperation

_SUFFIXES: dict[str, Decimal] = {
    "n": Decimal("1e-9"),
    "u": Decimal("1e-6"),
    "m": Decimal("1e-3"),
    "": Decimal(1),
    "k": Decimal("1e3"),
    "M": Decimal("1e6"),
    "G": Decimal("1e9"),
    "T": Decimal("1e12"),
    "P": Decimal("1e15"),
    "E": Decimal("1e18"),
    "Ki": Decimal(2**10),
    "Mi": Decimal(2**20),
    "Gi": Decimal(2**30),
    "Ti": Decimal(2**40),
    "Pi": Decimal(2**50),
    "Ei": Decimal(2**60),
}
_PATTERN = re.compile(r"^([+-]?[0-9.]+)([eE][+-]?[0-9]+|Ki|[numkMGTPE]i?|)$")


class QuantityError(ValueError):
    """Not a Kubernetes quantity."""


def parse_quantity(text: str | int | float) -> Decimal:
    """The quantity's value in base units (cores, bytes, ...)."""
    if isinstance(text, int | float):
        return Decimal(str(text))
    match = _PATTERN.match(text.strip())
    if not match or match.group(2) in ("ni", "ui", "mi", "ki"):
        raise QuantityError(f"invalid quantity {text!r}")
    number, suffix = match.groups()
    try:
        value = Decimal(number)
    except InvalidOperation as error:
        raise QuantityError(f"invalid quantity {text!r}") from error
    if suffix[:1] in ("e", "E"):
        return value * (Decimal(10) ** int(suffix[1:]))
    return value * _SUFFIXES[suffix]
