"""The `sim` backend: a simulated serverless platform for tests, demos and benchmarks.

Modules:
- exec: Built-in commands for `kubectl exec` and `attach` on simulated pods, and a toy
  port-forward.
- provider: A simulated backend whose pods "run" on a clock, with faults on demand.
- record_files: The sim's pod records on disk, one small JSON file per pod, written
  inline.
- telemetry: What simulated containers print and consume: deterministic logs and
  resource usage.
- timeline: The simulated pod timeline: what each pod is doing at a given moment.
"""

from vkpy.providers.sim.provider import SimConfig, SimProvider

__all__ = ["SimConfig", "SimProvider"]
