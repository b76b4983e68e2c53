"""A real Kubernetes control plane on 127.0.0.1 for developing and testing vkpy.

vkpy has to behave against the real API server, scheduler and controller-manager,
so development and the test suite run the pinned release's own binaries rather than
a fake: `python -m vkpy.devcluster up` (or `DevCluster(dir).up()` from Python)
starts etcd, kube-apiserver, kube-controller-manager and kube-scheduler wired like a
kubeadm node, and `down` stops them. Nothing in the product imports this package.
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
