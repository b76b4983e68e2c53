"""The Node and its heartbeat: registering the Node, keeping its status true, and
renewing its Lease in kube-node-lease.

Modules:
- lease: The node's Lease in kube-node-lease: the cheap heartbeat the control plane
  watches.
- node_controller: Registering this node and keeping its status true.
- node_status: The Node object vkpy registers, and its status, built from settings and
  the backend.
"""
