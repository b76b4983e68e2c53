"""vkpy: a virtual kubelet in Python.

vkpy registers a Node with a Kubernetes API server, runs the pods bound to it on a
backend that is not the node's container runtime, reports their status, and serves the
kubelet HTTPS API so that kubectl logs/exec/port-forward/top work on those pods.

The packages, from the top layer down (pyproject.toml's import-linter contracts hold
it; docs/architecture.md draws it): app, tools, devcluster; fleet; api, node;
providers, kube; streams, oci; core.

Modules:
- api/: The kubelet HTTPS API on :10250: TLS, authentication, authorization, and the
  endpoints the API server and metrics-server call (logs, exec, stats, metrics).
- app/: The `vkpy` command: flags to settings (cli), the wiring of settings to a node
  host (runner), and the process tuning the agent applies at start (event loop, garbage
  collector pauses, event-loop lag).
- core/: The lowest layer: small utilities every other package may use and that use no
  other package of vkpy (Kubernetes object views, time, quantities, JSON, metrics,
  logging, cancellation, the open-file limit).
- devcluster/: A real Kubernetes control plane on 127.0.0.1 for developing and testing
  vkpy.
- fleet/: Node sets: many virtual nodes from one process, how several replicas share a
  set (Leases per node) and leader election for a node with standbys, plus the settings
  of everything a host runs.
- kube/: Talking to the Kubernetes API server: requests, watches, patches, events.
- node/: The kubelet's behaviour: the Node and its Lease (heartbeat/), the pods bound to
  it and their status (pods/), and what a pod's spec resolves to (podspec/).
- oci/: OCI images and the OCI runtime, for the embedded (process) backend.
- providers/: Backends that run pods: the contract in `base`, typed errors in `errors`,
  one subpackage per backend, and `registry` to pick one by name.
- streams/: Sans-IO codecs for the kubelet's streaming protocols (SPDY/3.1 and the
  channel.k8s.io family).
- tools/: vkpy's side commands, run as their own processes (`python -m
  vkpy.tools.<name>`): the chart's CSR approver and uninstall hook, and what they share.
"""

__version__ = "0.1.0"
