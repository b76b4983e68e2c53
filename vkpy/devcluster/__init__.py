"""A real Kubernetes control plane on 127.0.0.1 for developing and testing vkpy.

vkpy has to behave against the real API server, scheduler and controller-manager,
so development and the test suite run the pinned release's own binaries rather than
a fake: `python -m vkpy.devcluster up` (or `DevCluster(dir).up()` from Python)
starts etcd, kube-apiserver, kube-controller-manager and kube-scheduler wired like a
kubeadm node, and `down` stops them. Nothing in the product imports this package.

Modules:
- access: How a tool or test talks to a cluster: a kubeconfig plus the pinned kubectl.
- addons: What runs beside the control plane: metrics-server and the nodes `up` started.
- binaries: Finding the control-plane binaries the dev cluster runs.
- cluster: The local development control plane: etcd, API server, controller-manager,
  scheduler.
- cluster_pki: The dev cluster's PKI: which certificates exist, who signs them, where
  they live.
- components: What the dev cluster runs: file layout, ports, settings and each
  component's flags.
- demo: `make run`: a virtual node doing real work, on the local control plane or yours.
- extras: Starting and stopping what runs on top of the control plane: metrics-server,
  the image registry, nodes.
- hybrid_demo: `python -m vkpy.devcluster demo hybrid` (`make demo`): the burst
  scenario, watched live.
- images/: Images built here, for the dev cluster's registry and the tests.
- kubeconfig: Kubeconfig files for the dev cluster's users.
- load: The load generator of the burst scenario: jobs dropped into a shared queue
  directory.
- metrics_server: metrics-server for the dev cluster: `kubectl top` and the HPA's
  resource metrics.
- netns: A network namespace of our own for runs that need a node address that is not
  loopback.
- nodes: The dev cluster's nodes: a regular pool of workers, and virtual nodes beside
  it.
- pod_network: The dev cluster's pod network: each worker's pod CIDR, and where its
  pods find the API server.
- pki: Minting X.509 certificate authorities and certificates with `cryptography`.
- probes: Health probes against the control-plane components over mutual TLS.
- processes: Starting, recognising and stopping the control-plane processes.
- registry: The dev cluster's image registry: where its nodes pull images from, offline.
- service_ip: The `kubernetes` Service at its ClusterIP, inside a network namespace of a
  run's own; as the `api-relay` add-on, the API server at pod_network's address.
- state: The record of a running dev cluster, and the ports it listens on.
"""

from .access import ClusterAccess, KubectlError, RunKubectl
from .binaries import BinariesMissing, find_bin_dir, pinned_release
from .cluster import ClusterError, ComponentFailed, DevCluster, given_or_started
from .components import Settings
from .pki import CertificateAuthority, issue_cert

__all__ = [
    "BinariesMissing",
    "CertificateAuthority",
    "ClusterAccess",
    "ClusterError",
    "ComponentFailed",
    "DevCluster",
    "KubectlError",
    "RunKubectl",
    "Settings",
    "find_bin_dir",
    "given_or_started",
    "issue_cert",
    "pinned_release",
]
