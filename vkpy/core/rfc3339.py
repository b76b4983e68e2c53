"""Kubernetes' times, formatted and parsed in one place.

The API speaks RFC 3339 in three precisions: metav1.Time (whole seconds, the
status times, startTime, lastTransitionTime), metav1.MicroTime (Lease renewTime,
Events) and RFC3339Nano (log timestamps, where nine fractional digits are always
written so lines sort as text). Every layer formats and parses with these
functions, so no copy can drift; the parser takes any RFC 3339 precision and
offset. Backends use them too: this module depends on nothing of vkpy.
"""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta

_PATTERN = re.compile(
    r"^(\d{4})-(\d{2})-(\d{2})[Tt](\d{2}):(\d{2}):(\d{2})(?:\.(\d+))?([Zz]|[+-]\d{2}:\d{2})$"
)
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


def _utc(moment: datetime | float) -> datetime:
    if isinstance(moment, datetime):
        return moment.astimezone(UTC) if moment.tzinfo else moment.replace(tzinfo=UTC)
    return datetime.fromtimestamp(moment, UTC)


def format_time(moment: datetime | float) -> str:
    """metav1.Time: UTC, whole seconds (`2026-12-01T04:30:00Z`). A float is epoch seconds."""
    return _utc(moment).strftime("%Y-%m-%dT%H:%M:%SZ")


def format_micro(moment: datetime | float) -> str:
    """metav1.MicroTime: UTC with six fractional digits. (isoformat, not strftime:
    a node set's 100 Lease renewals a second each write one, and strftime costs three
    times as much.)"""
    text = _utc(moment).replace(tzinfo=None).isoformat()  # no fraction when it is 0
    return text + "Z" if len(text) > 19 else text + ".000000Z"


def format_nano(moment: datetime | int) -> str:
    """RFC3339Nano with exactly nine fractional digits. An int is nanoseconds since
    the epoch (full precision); a datetime has microseconds."""
    if isinstance(moment, datetime):
        utc = _utc(moment)
        return f"{utc:%Y-%m-%dT%H:%M:%S}.{utc.microsecond:06d}000Z"
    seconds, fraction = divmod(moment, 1_000_000_000)
    return f"{_EPOCH + timedelta(seconds=seconds):%Y-%m-%dT%H:%M:%S}.{fraction:09d}Z"


def _parts(text: str) -> tuple[datetime, str]:
    """The time to whole seconds (UTC) and the fraction's digits; ValueError if not RFC 3339."""
    match = _PATTERN.match(text)
    if not match:
        raise ValueError(f"not an RFC 3339 time: {text!r}")
    year, month, day, hour, minute, second, fraction, zone = match.groups()
    offset = timedelta(0)
    if zone not in ("Z", "z"):
        sign = 1 if zone[0] == "+" else -1
        offset = sign * timedelta(hours=int(zone[1:3]), minutes=int(zone[4:6]))
    local = datetime(
        int(year), int(month), int(day), int(hour), int(minute), int(second), tzinfo=UTC
    )
    try:
        return local - offset, fraction or ""
    except OverflowError:  # 0001-01-01T00:00:00+23:59 and the like
        raise ValueError(f"time out of range: {text!r}") from None


def parse(text: str) -> datetime:
    """An RFC 3339 time (any fraction, any offset) as an aware UTC datetime (to the
    microsecond); ValueError when it is not one."""
    whole, fraction = _parts(text)
    try:
        return whole + timedelta(microseconds=int(fraction[:6].ljust(6, "0")))
    except OverflowError:
        raise ValueError(f"time out of range: {text!r}") from None


def parse_or_none(value: object) -> datetime | None:
    """`parse` for a field of an object: None when absent or malformed."""
    if not isinstance(value, str):
        return None
    try:
        return parse(value)
    except ValueError:
        return None


def parse_nano(text: str) -> int:
    """Nanoseconds since the epoch from an RFC 3339 time with any fraction."""
    whole, fraction = _parts(text)
    seconds = int((whole - _EPOCH).total_seconds())
    return seconds * 1_000_000_000 + int(fraction[:9].ljust(9, "0"))
