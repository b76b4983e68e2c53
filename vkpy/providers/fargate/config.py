"""Settings of the `fargate` backend (its `--provider-config`)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from vkpy.providers.aws.settings import AwsSettings
from vkpy.providers.config_reader import ConfigReader

DEFAULT_CAPACITY: Mapping[str, str] = {
    "cpu": "100",
    "memory": "400Gi",
    "pods": "500",
    "ephemeral-storage": "10Ti",
}


@dataclass(frozen=True)
class FargateConfig:
    """Where a node's tasks run and how vkpy watches them."""

    aws: AwsSettings
    subnets: tuple[str, ...]
    """awsvpc subnets of every task (at least one)."""
    security_groups: tuple[str, ...] = ()
    assign_public_ip: bool = False
    cluster: str = "default"
    """The ECS cluster tasks run in (it must exist)."""
    execution_role_arn: str | None = None
    """The role ECS uses to pull images and write logs (needed for awslogs and ECR)."""
    task_role_arn: str | None = None
    """The role the containers' code gets."""
    platform_version: str | None = None
    log_group: str = "/vkpy/fargate"
    """CloudWatch Logs group of the awslogs driver (created when missing)."""
    poll_interval: float = 5.0
    """Seconds between DescribeTasks rounds that notice state changes."""
    restart_backoff: float = 10.0
    """First wait before re-running a stopped task; doubles per restart."""
    restart_backoff_max: float = 300.0
    stop_wait: float = 30.0
    """How long past the grace period delete waits for a task to stop."""
    log_poll_max: float = 5.0
    """Longest wait between polls of CloudWatch Logs while following logs."""
    enable_execute_command: bool = False
    """Start tasks with ECS Exec on, so `kubectl exec` works (the task role needs the
    ssmmessages permissions; see docs/aws-backends.md)."""

    @classmethod
    def from_dict(cls, raw: Mapping[str, object]) -> FargateConfig:
        reader = ConfigReader(raw)
        aws = AwsSettings.read(reader, DEFAULT_CAPACITY)
        config = cls(
            aws=aws,
            subnets=reader.strings("subnets"),
            security_groups=reader.strings("security_groups"),
            assign_public_ip=reader.boolean("assign_public_ip", False),
            cluster=reader.string("cluster", "default") or "default",
            execution_role_arn=reader.string("execution_role_arn"),
            task_role_arn=reader.string("task_role_arn"),
            platform_version=reader.string("platform_version"),
            log_group=reader.string("log_group", "/vkpy/fargate") or "/vkpy/fargate",
            poll_interval=reader.number("poll_interval", 5.0),
            restart_backoff=reader.number("restart_backoff", 10.0),
            restart_backoff_max=reader.number("restart_backoff_max", 300.0),
            stop_wait=reader.number("stop_wait", 30.0),
            log_poll_max=reader.number("log_poll_max", 5.0),
            enable_execute_command=reader.boolean("enable_execute_command", False),
        )
        reader.finish()
        if not config.subnets:
            raise ValueError("subnets is required (awsvpc needs at least one subnet)")
        if config.poll_interval <= 0:
            raise ValueError("poll_interval must be positive")
        return config
