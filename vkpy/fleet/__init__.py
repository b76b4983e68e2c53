"""Node sets: many virtual nodes from one process, how several replicas share a set
(Leases per node) and leader election for a node with standbys, plus the settings
of everything a host runs.

Modules:
- host: The one host of vkpy's nodes: a single node is a node set of one.
- leader: Leader election among vkpy replicas that serve one virtual node, on a Lease.
- membership: Who serves a host's nodes when nothing is shared: every node, at once or
  while leading.
- node_set: A node set: many virtual nodes served by one process, from `--nodes N` or a
  file.
- settings: vkpy's settings: frozen dataclasses grouped by concern, built once from
  flags.
- shard_plan: Who serves which node of a set when several replicas share it: the rules,
  no I/O.
- sharded: A node set shared by several replicas, with Kubernetes as the only
  coordinator.
"""
