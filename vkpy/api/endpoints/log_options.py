"""The query of `GET /containerLogs/...`, decoded and checked as the kubelet does.

The kubelet decodes the query into a v1 PodLogOptions with the API machinery's
rules, then validates it, and its status codes follow from that: a value that does
not decode (a number that is not one, a time that is not RFC 3339, a time before
year 1 or after 9999 once its offset is applied, a `sinceSeconds` reaching before
year 1) is a 400
`{"message": "Unable to decode query."}`; a value that decodes but is not allowed
(negative tailLines, limitBytes or sinceSeconds below 1, both sinceSeconds and
sinceTime, an unknown stream, tailLines with a single stream) is a 422
`{"message": "Invalid request."}`. Booleans follow the machinery too: only "false"
and "0" are false, any other value is true. `tail` is the old name of `tailLines`
("all" meaning no limit). Pure functions, tested without a server.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Literal

from vkpy.core.rfc3339 import format_nano, parse
from vkpy.providers.base import LogQuery, LogStream

StreamName = Literal["All", "Stdout", "Stderr"]
DECODE_ERROR = '{"message": "Unable to decode query."}'
INVALID_ERROR = '{"message": "Invalid request."}'

_INT = re.compile(r"^[+-]?\d+$")
_STREAMS: dict[str, frozenset[LogStream]] = {
    "All": frozenset({"stdout", "stderr"}),
    "Stdout": frozenset({"stdout"}),
    "Stderr": frozenset({"stderr"}),
}
_INT64 = (-(2**63), 2**63 - 1)
MAX_SINCE_SECONDS = int(
    (datetime(1970, 1, 1, tzinfo=UTC) - datetime.min.replace(tzinfo=UTC)).total_seconds()
)
"""Seconds from year 1 to 1970: any `sinceSeconds` above reaches before year 1 (a
time no one can ask about), so it does not decode."""


class LogOptionsError(Exception):
    """The query cannot be served: `status` and `body` are the kubelet's answer."""

    def __init__(self, status: int, body: str, detail: str) -> None:
        super().__init__(detail)
        self.status = status
        self.body = body


@dataclass(frozen=True)
class LogOptions:
    follow: bool = False
    previous: bool = False
    timestamps: bool = False
    since_seconds: int | None = None
    since_time: datetime | None = None
    tail_lines: int | None = None
    limit_bytes: int | None = None
    stream: StreamName | None = None

    def since(self, now: datetime) -> datetime | None:
        if self.since_seconds is not None:
            return now - timedelta(seconds=self.since_seconds)
        return self.since_time

    def query(self, container: str, now: datetime) -> LogQuery:
        """What the backend is asked for (timestamps and limitBytes are applied here)."""
        return LogQuery(
            container=container,
            follow=self.follow,
            previous=self.previous,
            since=self.since(now),
            tail_lines=self.tail_lines,
            streams=_STREAMS[self.stream or "All"],
        )


def _decode_error(name: str, value: str) -> LogOptionsError:
    return LogOptionsError(400, DECODE_ERROR, f"cannot decode {name}={value!r}")


def _invalid(detail: str) -> LogOptionsError:
    return LogOptionsError(422, INVALID_ERROR, detail)


def _bool(values: Sequence[str]) -> bool:
    if not values:
        return False
    return not (values[0] == "0" or values[0].lower() == "false")


def _int(name: str, values: Sequence[str]) -> int | None:
    if not values:
        return None
    text = values[0]
    if not _INT.match(text):
        raise _decode_error(name, text)
    value = int(text)
    if not _INT64[0] <= value <= _INT64[1]:
        raise _decode_error(name, text)
    return value


def _time(name: str, values: Sequence[str]) -> datetime | None:
    if not values or values[0] in ("", "null"):
        return None
    try:
        return parse(values[0])
    except ValueError:
        raise _decode_error(name, values[0]) from None


def parse_log_options(query: Mapping[str, Sequence[str]]) -> LogOptions:
    """Decode and validate; LogOptionsError carries the kubelet's status and body."""
    values = dict(query)
    tail = values.get("tail")
    if tail and tail[0]:
        values.pop("tailLines", None)
        if tail[0] != "all":
            values["tailLines"] = [tail[0]]
    stream_values = values.get("stream")
    stream = stream_values[0] if stream_values else None
    options = LogOptions(
        follow=_bool(values.get("follow", ())),
        previous=_bool(values.get("previous", ())),
        timestamps=_bool(values.get("timestamps", ())),
        since_seconds=_int("sinceSeconds", values.get("sinceSeconds", ())),
        since_time=_time("sinceTime", values.get("sinceTime", ())),
        tail_lines=_int("tailLines", values.get("tailLines", ())),
        limit_bytes=_int("limitBytes", values.get("limitBytes", ())),
    )
    if options.since_seconds is not None and options.since_seconds > MAX_SINCE_SECONDS:
        raise _decode_error("sinceSeconds", str(options.since_seconds))
    if options.tail_lines is not None and options.tail_lines < 0:
        raise _invalid("tailLines must be non-negative")
    if options.limit_bytes is not None and options.limit_bytes < 1:
        raise _invalid("limitBytes must be greater than 0")
    if options.since_seconds is not None and options.since_time is not None:
        raise _invalid("at most one of sinceTime or sinceSeconds may be specified")
    if options.since_seconds is not None and options.since_seconds < 1:
        raise _invalid("sinceSeconds must be greater than 0")
    if stream is not None:
        if stream not in _STREAMS:
            raise _invalid(f"unsupported stream {stream!r}")
        if stream != "All" and options.tail_lines is not None:
            raise _invalid("tailLines and a specific stream are mutually exclusive")
        return LogOptions(**{**options.__dict__, "stream": stream})
    return options


def format_timestamp(moment: datetime) -> bytes:
    """RFC 3339 in UTC with exactly nine fractional digits, then a space."""
    return f"{format_nano(moment)} ".encode()
