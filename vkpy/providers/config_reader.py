"""A strict reader for a backend's `--provider-config` mapping, shared by backends.

Every backend reads a YAML mapping written by hand, where a typo must never silently
change nothing: each value is read with its type checked and a message naming the
key, and `finish` refuses any key nobody read. A nested mapping is read with a reader
of its own whose `where` prefix ("network.", "credentials.") names it in messages.
"""

from __future__ import annotations

from collections.abc import Mapping


class ConfigReader:
    """Typed access to a raw config mapping; `finish` fails on keys nobody read."""

    def __init__(self, raw: Mapping[str, object], where: str = "") -> None:
        self._raw = dict(raw)
        self._seen: set[str] = set()
        self._where = where

    def _get(self, key: str) -> object | None:
        self._seen.add(key)
        return self._raw.get(key)

    def _name(self, key: str) -> str:
        return self._where + key

    def string(self, key: str, default: str | None = None) -> str | None:
        value = self._get(key)
        if value is None:
            return default
        if isinstance(value, bool) or not isinstance(value, str | int | float):
            raise ValueError(f"{self._name(key)} must be a string")
        return str(value)

    def required(self, key: str) -> str:
        value = self.string(key)
        if not value:
            raise ValueError(f"{self._name(key)} is required")
        return value

    def number(self, key: str, default: float) -> float:
        value = self._get(key)
        if value is None:
            return default
        if isinstance(value, bool) or not isinstance(value, int | float | str):
            raise ValueError(f"{self._name(key)} must be a number")
        try:
            number = float(value)
        except ValueError:
            raise ValueError(f"{self._name(key)} must be a number") from None
        if number < 0:
            raise ValueError(f"{self._name(key)} must not be negative")
        return number

    def integer(self, key: str, default: int) -> int:
        number = self.number(key, default)
        if number != int(number):
            raise ValueError(f"{self._name(key)} must be a whole number")
        return int(number)

    def boolean(self, key: str, default: bool) -> bool:
        value = self._get(key)
        if value is None:
            return default
        if not isinstance(value, bool):
            raise ValueError(f"{self._name(key)} must be true or false")
        return value

    def strings(self, key: str) -> tuple[str, ...]:
        """A list of strings, or one comma-separated string."""
        value = self._get(key)
        if value is None:
            return ()
        if isinstance(value, str):
            return tuple(v.strip() for v in value.split(",") if v.strip())
        if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
            raise ValueError(f"{self._name(key)} must be a list of strings")
        return tuple(value)

    def mapping(self, key: str) -> Mapping[str, object]:
        """A nested mapping as it is (read it with `ConfigReader(..., where)`)."""
        value = self._get(key)
        if value is None:
            return {}
        if not isinstance(value, Mapping):
            raise ValueError(f"{self._name(key)} must be a mapping")
        return value

    def string_map(self, key: str) -> dict[str, str]:
        """A mapping of names to values, every value as a string (labels, capacity)."""
        return {str(k): str(v) for k, v in self.mapping(key).items()}

    def finish(self) -> None:
        unknown = sorted(set(self._raw) - self._seen)
        if unknown:
            names = ", ".join(self._name(k) for k in unknown)
            raise ValueError(f"unknown setting(s): {names}")
