"""pytest fixtures for the AWS backends' tests: moto's server, the proxy, fake credentials.

Import them into a test module (`from tests.integration.aws_fixtures import *`-style,
by name). moto runs once per session (state accumulates, so every test names its
own cluster, role and node); each test gets a fresh proxy in front of it and an
environment whose credentials and endpoints can only reach the emulator.
"""

from __future__ import annotations

import secrets
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest

from tests.integration.moto_server import (
    Aws,
    AwsProxy,
    MotoServer,
    fake_aws_environment,
)
from tests.integration.ssm_endpoint import SsmEndpoint

_SHARED: list[MotoServer] = []
"""The session's one server: each module importing the fixture gets its own fixture
definition, and all of them share it (stopped at the end of the session)."""


@pytest.fixture(scope="session")
def moto(tmp_path_factory: pytest.TempPathFactory) -> Iterator[MotoServer]:
    if not _SHARED:
        _SHARED.append(MotoServer(tmp_path_factory.mktemp("moto") / "moto.log").start())
    server = _SHARED[0]
    try:
        yield server
    finally:
        server.stop()
        _SHARED.clear()


@pytest.fixture
def aws_proxy(moto: MotoServer) -> Iterator[AwsProxy]:
    proxy = AwsProxy(moto.url).start()
    try:
        with fake_aws_environment(proxy.url):
            yield proxy
    finally:
        proxy.stop()


@pytest.fixture
def ssm_endpoint(moto: MotoServer, aws_proxy: AwsProxy) -> Iterator[SsmEndpoint]:
    """ECS ExecuteCommand and the Session Manager data channel (moto has neither),
    answered through the test's proxy."""
    endpoint = SsmEndpoint(moto.url).start()
    aws_proxy.intercepts.append(endpoint.intercept)
    aws_proxy.rewrites.append(endpoint.observe)
    try:
        yield endpoint
    finally:
        endpoint.stop()


@pytest.fixture
def aws(moto: MotoServer) -> Aws:
    return Aws(moto)


@dataclass
class FargateSetup:
    """An ECS cluster with a network for one test, and the provider config for it."""

    cluster: str
    subnet: str
    security_group: str
    log_group: str
    endpoint: str

    def config(self, **overrides: Any) -> dict[str, Any]:
        return {
            "region": "us-east-1",
            "endpoint_url": self.endpoint,
            "cluster": self.cluster,
            "subnets": [self.subnet],
            "security_groups": [self.security_group],
            "log_group": self.log_group,
            "execution_role_arn": "arn:aws:iam::123456789012:role/ecsTaskExecutionRole",
            "poll_interval": 0.5,
            "restart_backoff": 1.0,
            "restart_backoff_max": 4.0,
            "stop_wait": 10,
            "log_poll_max": 1.0,
            "retry_base_delay": 0.05,
            "retry_max_delay": 0.5,
            "retry_attempts": 8,
            **overrides,
        }


@pytest.fixture
def fargate_setup(aws: Aws, aws_proxy: AwsProxy) -> FargateSetup:
    suffix = secrets.token_hex(3)
    cluster = f"vkpy-test-{suffix}"
    aws("ecs", "create_cluster", clusterName=cluster)
    subnet, group = aws.network()
    return FargateSetup(cluster, subnet, group, f"/vkpy/test-{suffix}", aws_proxy.url)


@dataclass
class LambdaSetup:
    role_arn: str
    endpoint: str

    def config(self, **overrides: Any) -> dict[str, Any]:
        return {
            "region": "us-east-1",
            "endpoint_url": self.endpoint,
            "role_arn": self.role_arn,
            "log_poll_max": 1.0,
            "retry_base_delay": 0.05,
            "retry_max_delay": 0.5,
            "retry_attempts": 8,
            **overrides,
        }


@pytest.fixture
def lambda_setup(aws: Aws, aws_proxy: AwsProxy) -> LambdaSetup:
    return LambdaSetup(aws.role(f"vkpy-fn-{secrets.token_hex(3)}"), aws_proxy.url)
