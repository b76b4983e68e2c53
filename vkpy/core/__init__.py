"""The lowest layer: small utilities every other package may use and that use no other
package of vkpy (Kubernetes object views, time, quantities, JSON, metrics, logging,
cancellation, the open-file limit).

Modules:
- cancelling: Cancelling tasks and waiting for them, without losing the caller's own
  cancellation.
- clock: The time every controller and simulated backend reads, injectable for tests.
- flag: A one-way `asyncio.Event` for objects that exist once per node.
- jsoncodec: JSON encoding and decoding for every hot path, in one place.
- log: Structured logging: `key=value` text or one JSON object per line.
- metrics: vkpy's own Prometheus metrics, defined once so every layer records into the
  same series and `/metrics` can serve them (prometheus-client's default registry).
- objects: Plain-JSON views of Kubernetes objects shared by every layer.
- open_files: The agent's open-file limit, raised at start, and the share its kubelet
  API may hold.
- packed_json: Pods kept for hours, as compressed JSON.
- quantity: Kubernetes resource quantities ("500m", "1Gi", "2e3") as exact numbers.
- rfc3339: Kubernetes' times, formatted and parsed in one place.
- shared_timer: Many tasks' long sleeps on one event-loop timer, woken together in
  slots.
"""
