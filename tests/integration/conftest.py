"""Fixtures for agent tests: start vkpy nodes against the session's control plane."""

from __future__ import annotations

import secrets
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.integration.agent import Agent, Kube, free_port
from vkpy.devcluster import ClusterAccess
from vkpy.devcluster.state import free_port_range

StartAgent = Callable[..., Agent]


@pytest.fixture
def kube(cluster: ClusterAccess, namespace: str) -> Kube:
    return Kube(cluster, namespace)


@pytest.fixture
def start_agent(cluster: ClusterAccess, tmp_path: Path) -> Iterator[StartAgent]:
    """start_agent(provider="sim", config={...}, args=[...], kubeconfig_env=None) -> a
    running Agent on a new node (with `kubeconfig_env`, KUBECONFIG names its kubeconfig).

    Every agent is stopped and its Node deleted at the end of the test; its log is
    printed when the test failed."""
    agents: list[Agent] = []

    def start(
        provider: str = "sim",
        config: dict[str, Any] | None = None,
        args: list[str] | None = None,
        kubeconfig_env: str | None = None,
        ports: int = 1,
    ) -> Agent:
        name = f"vk-{secrets.token_hex(3)}"
        state = tmp_path / name
        state.mkdir()
        config_path = None
        if config is not None:
            config_path = state / "provider.yaml"
            config_path.write_text(yaml.safe_dump(config))
        agent = Agent(
            cluster=cluster,
            node_name=name,
            state_dir=state / "state",
            log_path=tmp_path / f"{name}.log",
            provider=provider,
            provider_config=config_path,
            extra_args=args or [],
            kubeconfig_env=kubeconfig_env,
            port=free_port() if ports == 1 else free_port_range(ports),
        )
        agents.append(agent.start())
        return agent

    yield start
    for agent in agents:
        agent.stop()
        cluster.run_kubectl("delete", "node", agent.node_name, "--wait=false", check=False)
        print(f"--- log of {agent.node_name} ---\n{agent.logs()[-20000:]}")
