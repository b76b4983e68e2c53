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
    operating_system: str | None = None
    """`--os`, for backends that run one operating system or another (aci)."""


Factory = Callable[[Mapping[str, object], ProviderContext], Provider]


class ProviderConfigError(ValueError):
    """The backend's configuration is invalid; the message says what to fix."""


def _build(name: str, make: Callable[[], Provider]) -> Provider:
    """Run a backend's constructor, turning its config errors into ProviderConfigError."""
    try:
        return make()
    except (TypeError, ValueError) as error:
        raise ProviderConfigError(f"{name}: {error}") from error


def _sim(raw: Mapping[str, object], ctx: ProviderContext) -> Provider:
    sim = importlib.import_module("vkpy.providers.sim")
    return _build(
        "sim", lambda: sim.SimProvider(sim.SimConfig.from_dict(raw, state_dir=ctx.state_dir))
    )


def _lambda(raw: Mapping[str, object], ctx: ProviderContext) -> Provider:
    aws = importlib.import_module("vkpy.providers.awslambda")
    return _build(
        "lambda", lambda: aws.LambdaProvider(aws.LambdaConfig.from_dict(raw), ctx.node_name)
    )


def _fargate(raw: Mapping[str, object], ctx: ProviderContext) -> Provider:
    aws = importlib.import_module("vkpy.providers.fargate")
    return _build(
        "fargate", lambda: aws.FargateProvider(aws.FargateConfig.from_dict(raw), ctx.node_name)
    )


def _aci(raw: Mapping[str, object], ctx: ProviderContext) -> Provider:
    aci = importlib.import_module("vkpy.providers.aci")
    return _build(
        "aci",
        lambda: aci.AciProvider(
            aci.AciConfig.from_dict(raw, os_type=ctx.operating_system), ctx.node_name
        ),
    )


def _process(raw: Mapping[str, object], ctx: ProviderContext) -> Provider:
    config = importlib.import_module("vkpy.providers.process.config")
    provider = importlib.import_module("vkpy.providers.process.provider")
    return _build(
        "process",
        lambda: provider.ProcessProvider(
            config.ProcessConfig.from_dict(
                raw,
                state_dir=ctx.state_dir,
                internal_ip=ctx.internal_ip,
                node_name=ctx.node_name,
            )
        ),
    )


_FACTORIES: dict[str, Factory] = {
    "sim": _sim,
    "lambda": _lambda,
    "fargate": _fargate,
    "process": _process,
    "aci": _aci,
    "azure": _aci,  # Virtual Kubelet's Helm chart and AKS virtual nodes call it so
}


def names() -> list[str]:
    return sorted(_FACTORIES)


def create(name: str, raw: Mapping[str, object], ctx: ProviderContext) -> Provider:
    factory = _FACTORIES.get(name)
    if factory is None:
        raise ProviderConfigError(f"unknown provider {name!r}; known: {', '.join(names())}")
    return factory(raw, ctx)
