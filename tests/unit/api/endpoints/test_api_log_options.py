"""containerLogs query decoding and validation, with the kubelet's status codes."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone

import pytest

from vkpy.api.endpoints.log_options import (
    DECODE_ERROR,
    INVALID_ERROR,
    LogOptions,
    LogOptionsError,
    format_timestamp,
    parse_log_options,
)
from vkpy.core.rfc3339 import parse as parse_rfc3339


def parse(**query: str) -> LogOptions:
    return parse_log_options({k: [v] for k, v in query.items()})


def test_empty_query_is_the_defaults() -> None:
    assert parse_log_options({}) == LogOptions()


def test_every_option_decodes() -> None:
    options = parse(
        follow="true",
        previous="1",
        timestamps="TRUE",
        sinceSeconds="30",
        tailLines="10",
        limitBytes="500",
        stream="All",
    )
    assert options == LogOptions(
        follow=True,
        previous=True,
        timestamps=True,
        since_seconds=30,
        tail_lines=10,
        limit_bytes=500,
        stream="All",
    )


@pytest.mark.parametrize(
    ("value", "expected"),
    [("false", False), ("FALSE", False), ("0", False), ("true", True), ("", True), ("x", True)],
)
def test_booleans_follow_the_api_machinery(value: str, expected: bool) -> None:
    assert parse(follow=value).follow is expected


def test_tail_is_the_old_name_of_tail_lines_and_all_means_everything() -> None:
    assert parse(tail="5").tail_lines == 5
    assert parse(tail="all", tailLines="3").tail_lines is None
    assert parse_log_options({"tail": ["7"], "tailLines": ["3"]}).tail_lines == 7


@pytest.mark.parametrize(
    "query",
    [
        {"tailLines": "ten"},
        {"tailLines": "1.5"},
        {"limitBytes": ""},
        {"sinceSeconds": "1e3"},
        {"sinceTime": "yesterday"},
        {"sinceTime": "2026-11-30"},
        {"sinceTime": "2026-11-30T10:00:00"},
        {"tailLines": "99999999999999999999"},
    ],
)
def test_undecodable_values_are_400(query: dict[str, str]) -> None:
    with pytest.raises(LogOptionsError) as caught:
        parse(**query)
    assert caught.value.status == 400
    assert caught.value.body == DECODE_ERROR


@pytest.mark.parametrize(
    "query",
    [
        {"tailLines": "-1"},
        {"limitBytes": "0"},
        {"sinceSeconds": "0"},
        {"sinceSeconds": "5", "sinceTime": "2026-11-30T10:00:00Z"},
        {"stream": "Stdin"},
        {"stream": "Stdout", "tailLines": "3"},
    ],
)
def test_invalid_values_are_422(query: dict[str, str]) -> None:
    with pytest.raises(LogOptionsError) as caught:
        parse(**query)
    assert caught.value.status == 422
    assert caught.value.body == INVALID_ERROR


def test_since_time_accepts_rfc3339_with_fractions_and_offsets() -> None:
    assert parse_rfc3339("2026-11-30T10:00:00Z") == datetime(2026, 11, 30, 10, tzinfo=UTC)
    assert parse_rfc3339("2026-11-30T10:00:00.123456789+02:00") == datetime(
        2026, 11, 30, 8, 0, 0, 123456, tzinfo=UTC
    )
    assert parse(sinceTime="").since_time is None


def test_query_for_the_backend() -> None:
    now = datetime(2026, 11, 30, 12, tzinfo=UTC)
    query = parse(sinceSeconds="60", stream="Stderr", follow="true")
    backend = query.query("app", now)
    assert backend.container == "app"
    assert backend.since == now - timedelta(seconds=60)
    assert backend.streams == frozenset({"stderr"})
    assert backend.follow is True
    assert parse().query("app", now).streams == frozenset({"stdout", "stderr"})


def test_timestamps_have_nine_fractional_digits_in_utc() -> None:
    moment = datetime(2026, 11, 30, 12, 0, 1, 5, tzinfo=UTC)
    assert format_timestamp(moment) == b"2026-11-30T12:00:01.000005000Z "
    local = datetime(2026, 11, 30, 13, 0, 1, tzinfo=UTC).astimezone(timezone(timedelta(hours=1)))
    assert format_timestamp(local) == b"2026-11-30T13:00:01.000000000Z "
