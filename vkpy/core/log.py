"""Structured logging: `key=value` text or one JSON object per line.

Every log call in vkpy passes its facts as `extra={...}` (pod, uid, error, ...), so
logs can be read by people and parsed by machines with the same calls. This module
turns those extras into fields.
"""

from __future__ import annotations

import json
import logging
import sys

from vkpy.core.rfc3339 import format_micro

_STANDARD = set(vars(logging.LogRecord("", 0, "", 0, "", None, None))) | {"message", "asctime"}


def _fields(record: logging.LogRecord) -> dict[str, object]:
    return {k: v for k, v in vars(record).items() if k not in _STANDARD and not k.startswith("_")}


def _time(record: logging.LogRecord) -> str:
    return format_micro(record.created)


class TextFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        parts = [
            _time(record),
            record.levelname.lower(),
            record.name,
            json.dumps(record.getMessage()),
        ]
        for key, value in _fields(record).items():
            text = value if isinstance(value, int | float) else json.dumps(str(value))
            parts.append(f"{key}={text}")
        line = " ".join(str(p) for p in parts)
        if record.exc_info:
            line += "\n" + self.formatException(record.exc_info)
        return line


class JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        out: dict[str, object] = {
            "time": _time(record),
            "level": record.levelname.lower(),
            "logger": record.name,
            "msg": record.getMessage(),
        }
        for key, value in _fields(record).items():
            out[key] = value if isinstance(value, int | float | bool | None) else str(value)
        if record.exc_info:
            out["exception"] = self.formatException(record.exc_info)
        return json.dumps(out)


def setup(level: str = "info", fmt: str = "text") -> None:
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(JsonFormatter() if fmt == "json" else TextFormatter())
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level.upper())
    for noisy in ("aiohttp.access", "botocore", "aiobotocore", "kubernetes_asyncio"):
        logging.getLogger(noisy).setLevel(max(logging.WARNING, root.level))
