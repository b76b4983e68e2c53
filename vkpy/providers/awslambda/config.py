"""Settings of the `lambda` backend (its `--provider-config`)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from vkpy.providers.aws.settings import AwsSettings
from vkpy.providers.config_reader import ConfigReader

DEFAULT_CAPACITY: Mapping[str, str] = {
    "cpu": "1000",
    "memory": "10Ti",
    "pods": "1000",
    "ephemeral-storage": "10Ti",
}
"""Lambda's default concurrency is 1000 executions per region."""


@dataclass(frozen=True)
class LambdaConfig:
    """What a node of Lambda functions needs besides its pods."""

    aws: AwsSettings
    role_arn: str
    """The execution role every function gets (Lambda requires one)."""
    default_memory_mb: int = 512
    """Memory of a function whose container has no memory limit or request."""
    default_timeout: int = 30
    """Timeout (s) of a function without the `vkpy.io/lambda-timeout` annotation."""
    log_poll_max: float = 5.0
    """Longest wait between polls of CloudWatch Logs while following logs."""

    @classmethod
    def from_dict(cls, raw: Mapping[str, object]) -> LambdaConfig:
        reader = ConfigReader(raw)
        aws = AwsSettings.read(reader, DEFAULT_CAPACITY)
        config = cls(
            aws=aws,
            role_arn=reader.required("role_arn"),
            default_memory_mb=reader.integer("default_memory_mb", 512),
            default_timeout=reader.integer("default_timeout", 30),
            log_poll_max=reader.number("log_poll_max", 5.0),
        )
        reader.finish()
        if not 128 <= config.default_memory_mb <= 10240:
            raise ValueError("default_memory_mb must be in [128, 10240]")
        if not 1 <= config.default_timeout <= 900:
            raise ValueError("default_timeout must be in [1, 900]")
        return config
