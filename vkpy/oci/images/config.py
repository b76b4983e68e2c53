"""An image's config (the OCI image config's `config` object), as a typed value.

Only what running a container from it needs: Entrypoint, Cmd, Env, WorkingDir, User,
the platform it is for, and the stop signal. Docker's and OCI's configs agree on
these fields; a missing one is empty, as both specs say.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any


class ImageConfigError(ValueError):
    """An image config that is not one: says which field is wrong."""


@dataclass(frozen=True)
class ImageConfig:
    entrypoint: tuple[str, ...] = ()
    cmd: tuple[str, ...] = ()
    env: tuple[str, ...] = ()  # "NAME=value", in the image's order
    working_dir: str = ""
    user: str = ""  # "", "uid", "name", "uid:gid", "name:group"
    architecture: str = ""
    os: str = ""
    stop_signal: str = ""

    @classmethod
    def from_json(cls, document: Mapping[str, Any]) -> ImageConfig:
        """From a whole image config document (`architecture`, `os`, `config`)."""
        config = document.get("config") or {}
        if not isinstance(config, Mapping):
            raise ImageConfigError("image config: 'config' is not an object")
        return cls(
            entrypoint=_strings(config, "Entrypoint"),
            cmd=_strings(config, "Cmd"),
            env=_strings(config, "Env"),
            working_dir=_string(config, "WorkingDir"),
            user=_string(config, "User"),
            architecture=_string(document, "architecture"),
            os=_string(document, "os"),
            stop_signal=_string(config, "StopSignal"),
        )

    def env_pairs(self) -> list[tuple[str, str]]:
        """Env as (name, value); an entry without `=` is a name with an empty value."""
        pairs = []
        for item in self.env:
            name, _, value = item.partition("=")
            pairs.append((name, value))
        return pairs


def _strings(config: Mapping[str, Any], key: str) -> tuple[str, ...]:
    value = config.get(key)
    if value is None:
        return ()
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise ImageConfigError(f"image config: {key} is not a list of strings")
    return tuple(value)


def _string(config: Mapping[str, Any], key: str) -> str:
    value = config.get(key)
    if value is None:
        return ""
    if not isinstance(value, str):
        raise ImageConfigError(f"image config: {key} is not a string")
    return value
