"""The `process` backend: each container of a pod runs as a process on this host.

Deliberately empty: the per-container supervisor (`python -m
vkpy.providers.process.supervisor`) and the exec helper import only the small,
standard-library modules of this package, so starting them stays cheap. The provider
itself is in `provider.py`; the design is in docs/process-backend.md.
"""
