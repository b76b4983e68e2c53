"""The one place Kubernetes times are formatted and parsed (issue 11: five copies)."""

from datetime import UTC, datetime, timedelta, timezone

import pytest

from vkpy.core import rfc3339

MOMENT = datetime(2026, 12, 1, 4, 30, 5, 123456, tzinfo=UTC)


def test_formats() -> None:
    assert rfc3339.format_time(MOMENT) == "2026-12-01T04:30:05Z"
    assert rfc3339.format_time(MOMENT.timestamp()) == "2026-12-01T04:30:05Z"
    assert rfc3339.format_micro(MOMENT) == "2026-12-01T04:30:05.123456Z"
    assert rfc3339.format_nano(MOMENT) == "2026-12-01T04:30:05.123456000Z"
    ns = int(MOMENT.replace(microsecond=0).timestamp()) * 1_000_000_000 + 123456789
    assert rfc3339.format_nano(ns) == "2026-12-01T04:30:05.123456789Z"
    local = MOMENT.astimezone(timezone(timedelta(hours=2)))
    assert rfc3339.format_time(local) == "2026-12-01T04:30:05Z"
    assert rfc3339.format_micro(local) == "2026-12-01T04:30:05.123456Z"
    # always six digits, also on a whole second and for a naive (UTC) moment
    assert rfc3339.format_micro(MOMENT.replace(microsecond=0)) == "2026-12-01T04:30:05.000000Z"
    naive = datetime(2026, 12, 1, 4, 30, 5, 7)
    assert rfc3339.format_micro(naive) == "2026-12-01T04:30:05.000007Z"


@pytest.mark.parametrize(
    "text",
    [
        "2026-12-01T04:30:05Z",
        "2026-12-01T04:30:05.000Z",
        "2026-12-01T06:30:05+02:00",
        "2026-12-01T04:30:05.999999999Z",
    ],
)
def test_parse_accepts_every_precision_and_offset(text: str) -> None:
    parsed = rfc3339.parse(text)
    assert parsed.tzinfo is not None
    assert parsed.replace(microsecond=0) == MOMENT.replace(microsecond=0)


def test_round_trips() -> None:
    assert rfc3339.parse(rfc3339.format_micro(MOMENT)) == MOMENT
    ns = 1_764_563_405_123_456_789
    assert rfc3339.parse_nano(rfc3339.format_nano(ns)) == ns
    assert rfc3339.parse_nano("2026-12-01T04:30:05Z") % 1_000_000_000 == 0


@pytest.mark.parametrize("bad", ["", "2026-12-01", "2026-12-01T04:30:05", "yesterday", 5, None])
def test_malformed_times(bad: object) -> None:
    assert rfc3339.parse_or_none(bad) is None
    if isinstance(bad, str):
        with pytest.raises(ValueError, match="not an RFC 3339 time"):
            rfc3339.parse(bad)
