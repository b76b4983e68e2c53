"""The settings every AWS backend has, and a strict reader for backend config files.

A backend's `--provider-config` is a flat YAML mapping. The AWS part of it (region,
endpoint, retries, node capacity) is the same for `lambda` and `fargate`, so it is
read here once; each backend reads its own keys with the same `ConfigReader`, which
rejects unknown keys and wrong types with a message that names the key.

Credentials are never in the config file: they come from the standard AWS chain
(environment, shared files and profiles, container or instance roles).
"""

from __future__ import annotations

import platform
from collections.abc import Mapping
from dataclasses import dataclass, field

from vkpy import __version__
from vkpy.providers.aws.retry import RetryPolicy
from vkpy.providers.base import NodeInfo, NodeResources
from vkpy.quantity import QuantityError, parse_quantity


class ConfigReader:
    """Typed access to a raw config mapping; `finish` fails on keys nobody read."""

    def __init__(self, raw: Mapping[str, object]) -> None:
        self._raw = dict(raw)
        self._seen: set[str] = set()

    def _get(self, key: str) -> object | None:
        self._seen.add(key)
        return self._raw.get(key)

    def string(self, key: str, default: str | None = None) -> str | None:
        value = self._get(key)
        if value is None:
            return default
        if not isinstance(value, str | int | float) or isinstance(value, bool):
            raise ValueError(f"{key} must be a string")
        return str(value)

    def required(self, key: str) -> str:
        value = self.string(key)
        if not value:
            raise ValueError(f"{key} is required")
        return value

    def number(self, key: str, default: float) -> float:
        value = self._get(key)
        if value is None:
            return default
        if isinstance(value, bool) or not isinstance(value, int | float | str):
            raise ValueError(f"{key} must be a number")
        try:
            number = float(value)
        except ValueError:
            raise ValueError(f"{key} must be a number") from None
        if number < 0:
            raise ValueError(f"{key} must not be negative")
        return number

    def integer(self, key: str, default: int) -> int:
        number = self.number(key, default)
        if number != int(number):
            raise ValueError(f"{key} must be a whole number")
        return int(number)

    def boolean(self, key: str, default: bool) -> bool:
        value = self._get(key)
        if value is None:
            return default
        if not isinstance(value, bool):
            raise ValueError(f"{key} must be true or false")
        return value

    def strings(self, key: str) -> tuple[str, ...]:
        value = self._get(key)
        if value is None:
            return ()
        if isinstance(value, str):
            return tuple(v.strip() for v in value.split(",") if v.strip())
        if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
            raise ValueError(f"{key} must be a list of strings")
        return tuple(value)

    def mapping(self, key: str) -> dict[str, str]:
        value = self._get(key)
        if value is None:
            return {}
        if not isinstance(value, dict):
            raise ValueError(f"{key} must be a mapping")
        return {str(k): str(v) for k, v in value.items()}

    def finish(self) -> None:
        unknown = set(self._raw) - self._seen
        if unknown:
            raise ValueError(f"unknown settings: {', '.join(sorted(unknown))}")


def capacity_from(
    reader: ConfigReader, defaults: Mapping[str, str]
) -> tuple[dict[str, str], dict[str, str]]:
    """Capacity and allocatable: `capacity` over `defaults`, `allocatable` over capacity."""
    capacity = dict(defaults)
    capacity.update(reader.mapping("capacity"))
    allocatable = dict(capacity)
    allocatable.update(reader.mapping("allocatable"))
    for name, value in (*capacity.items(), *allocatable.items()):
        try:
            parse_quantity(value)
        except QuantityError:
            raise ValueError(f"capacity {name}={value!r} is not a quantity") from None
    return capacity, allocatable


@dataclass(frozen=True)
class AwsSettings:
    """Where and how to reach AWS."""

    region: str | None = None
    """AWS region; None: the standard chain (AWS_REGION, AWS_DEFAULT_REGION, profile)."""
    endpoint_url: str | None = None
    """One endpoint for every service (an emulator such as moto); None: AWS's own."""
    profile: str | None = None
    """Named profile of the shared AWS config files; None: the default chain."""
    connect_timeout: float = 5.0
    read_timeout: float = 30.0
    retry: RetryPolicy = field(default_factory=RetryPolicy)
    capacity: Mapping[str, str] = field(default_factory=dict)
    """The Node's capacity (cpu, memory, pods, ...)."""
    allocatable: Mapping[str, str] = field(default_factory=dict)
    """The Node's allocatable; defaults to the capacity."""

    @classmethod
    def read(cls, reader: ConfigReader, default_capacity: Mapping[str, str]) -> AwsSettings:
        capacity, allocatable = capacity_from(reader, default_capacity)
        policy = RetryPolicy(
            attempts=max(1, reader.integer("retry_attempts", RetryPolicy.attempts)),
            base_delay=reader.number("retry_base_delay", RetryPolicy.base_delay),
            max_delay=reader.number("retry_max_delay", RetryPolicy.max_delay),
        )
        return cls(
            region=reader.string("region"),
            endpoint_url=reader.string("endpoint_url"),
            profile=reader.string("profile"),
            connect_timeout=reader.number("connect_timeout", 5.0),
            read_timeout=reader.number("read_timeout", 30.0),
            retry=policy,
            capacity=capacity,
            allocatable=allocatable,
        )

    def node_resources(self) -> NodeResources:
        return NodeResources(capacity=self.capacity, allocatable=self.allocatable)


def aws_node_info(runtime: str, os_image: str) -> NodeInfo:
    """What an AWS-backed Node reports in nodeInfo: the pods run on Linux/amd64."""
    return NodeInfo(
        operating_system="linux",
        architecture="amd64",
        runtime_name=runtime,
        runtime_version=__version__,
        kernel_version=platform.release(),
        os_image=os_image,
    )
