"""The settings every AWS backend has, and a strict reader for backend config files.

A backend's `--provider-config` is a flat YAML mapping. The AWS part of it (region,
endpoint, retries, node capacity) is the same for `lambda` and `fargate`, so it is
read here once; each backend reads its own keys with the shared `ConfigReader`
(vkpy.providers.config_reader), which rejects unknown keys and wrong types.

Credentials are never in the config file: they come from the standard AWS chain
(environment, shared files and profiles, container or instance roles).
"""

from __future__ import annotations

import platform
from collections.abc import Mapping
from dataclasses import dataclass, field

from vkpy import __version__
from vkpy.core.quantity import QuantityError, parse_quantity
from vkpy.providers.aws.retry import RetryPolicy
from vkpy.providers.base import NodeInfo, NodeResources
from vkpy.providers.config_reader import ConfigReader


def capacity_from(
    reader: ConfigReader, defaults: Mapping[str, str]
) -> tuple[dict[str, str], dict[str, str]]:
    """Capacity and allocatable: `capacity` over `defaults`, `allocatable` over capacity."""
    capacity = dict(defaults)
    capacity.update(reader.string_map("capacity"))
    allocatable = dict(capacity)
    allocatable.update(reader.string_map("allocatable"))
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
