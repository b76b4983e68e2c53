"""The kubelet's behaviour: the Node and its Lease (heartbeat/), the pods bound to it
and their status (pods/), and what a pod's spec resolves to (podspec/).

Modules:
- background: Runs a backend's long-lived tasks under supervision, inside the runner's
  task group.
- heartbeat/: The Node and its heartbeat: registering the Node, keeping its status true,
  and renewing its Lease in kube-node-lease.
- pods/: The pod loop: the pods bound to this node, each one's life step by step from
  its record, and the status and Events written for it (start at pod_controller, then
  pod_life; pod_reporting writes the status).
- podspec/: From a pod object to what a backend runs: admission, environment, volumes,
  ConfigMaps and Secrets, pull secrets, Services' variables, ephemeral containers.
- settings: The settings of the kubelet's behaviour: who the node is (NodeSettings, its
  taints) and how its pods are run (PodControllerSettings), in the one settings module
  of node/.
"""
