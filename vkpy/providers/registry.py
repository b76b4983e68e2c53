"""Choosing a backend by name (`--provider`) and building it from its config file.

Backends are imported only when chosen, so a node running `sim` never loads an SDK
it does not use. Adding a backend means adding a line to `_FACTORIES`.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from vkpy.providers.base import Provider


@dataclass(frozen=True)
class ProviderContext:
    """What every backend may need besides its own settings."""

    node_name: str
    state_dir: str
    internal_ip: str


Factory = Callable[[Mapping[str, object], ProviderContext], Provider]


class ProviderConfigError(ValueError):
    """The backend's configuration is invalid; the message says what to fix."""


def _sim(raw: Mapping[str, object], ctx: ProviderContext) -> Provider:
    sim = importlib.import_module("vkpy.providers.sim")
    try:
        config = sim.SimConfig.from_dict(raw, state_dir=ctx.state_dir)
    except (TypeError, ValueError) as error:
        raise ProviderConfigError(f"sim: {error}") from error
    provider: Provider = sim.SimProvider(config)
    return provider


def _lambda(raw: Mapping[str, object], ctx: ProviderContext) -> Provider:
    module = importlib.import_module("vkpy.providers.awslambda")
    try:
        config = module.LambdaConfig.from_dict(raw)
    except (TypeError, ValueError) as error:
        raise ProviderConfigError(f"lambda: {error}") from error
    provider: Provider = module.LambdaProvider(config, ctx.node_name)
    return provider


def _fargate(raw: Mapping[str, object], ctx: ProviderContext) -> Provider:
    module = importlib.import_module("vkpy.providers.fargate")
    try:
        config = module.FargateConfig.from_dict(raw)
    except (TypeError, ValueError) as error:
        raise ProviderConfigError(f"fargate: {error}") from error
    provider: Provider = module.FargateProvider(config, ctx.node_name)
    return provider


def _process(raw: Mapping[str, object], ctx: ProviderContext) -> Provider:
    config_module = importlib.import_module("vkpy.providers.process.config")
    provider_module = importlib.import_module("vkpy.providers.process.provider")
    try:
        config = config_module.ProcessConfig.from_dict(
            raw, state_dir=ctx.state_dir, internal_ip=ctx.internal_ip
        )
    except (TypeError, ValueError) as error:
        raise ProviderConfigError(f"process: {error}") from error
    provider: Provider = provider_module.ProcessProvider(config)
    return provider


_FACTORIES: dict[str, Factory] = {
    "sim": _sim,
    "lambda": _lambda,
    "fargate": _fargate,
    "process": _process,
}


def names() -> list[str]:
    return sorted(_FACTORIES)


def create(name: str, raw: Mapping[str, object], ctx: ProviderContext) -> Provider:
    factory = _FACTORIES.get(name)
    if factory is None:
        raise ProviderConfigError(f"unknown provider {name!r}; known: {', '.join(names())}")
    return factory(raw, ctx)
