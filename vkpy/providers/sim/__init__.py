"""The `sim` backend: a simulated serverless platform for tests, demos and benchmarks."""

from vkpy.providers.sim.provider import SimConfig, SimProvider

__all__ = ["SimConfig", "SimProvider"]
