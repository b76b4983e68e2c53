"""Node sets: many virtual nodes from one process, how several replicas share a set
(Leases per node) and leader election for a node with standbys, plus the settings
of everything a host runs.

Modules:
- host: Wiring for a node set: many virtual nodes in one process sharing what can be
  shared.
- leader: Leader election among vkpy replicas that serve one virtual node, on a Lease.
- node_set: A node set: many virtual nodes served by one process, from `--nodes N` or a
  file.
- settings: vkpy's settings: frozen dataclasses grouped by concern, built once from
  flags.
- shard_plan: Who serves which node of a set when several replicas share it: the rules,
  no I/O.
- sharded: A node set shared by several replicas, with Kubernetes as the only
  coordinator.
"""
