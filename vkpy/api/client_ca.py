"""The default client CA: the cluster CA that vkpy already trusts for the API server.

The API server reaches a kubelet with a client certificate (its
`--kubelet-client-certificate`), which in kubeadm-style clusters, and in vkpy's dev
cluster, is signed by the cluster CA; a kubelet set up by kubeadm trusts that CA as
its `clientCAFile`. So when `--client-ca-file` is not given, vkpy trusts the CA it
uses to verify the API server: the kubeconfig cluster's `certificate-authority-data`
or `certificate-authority` (relative to the kubeconfig's directory), or in a pod the
service account's ca.crt. Without any, client certificates are not requested and
callers need bearer tokens.
"""

from __future__ import annotations

import base64
import binascii
import logging
from pathlib import Path

import yaml

log = logging.getLogger(__name__)

IN_CLUSTER_CA = Path("/var/run/secrets/kubernetes.io/serviceaccount/ca.crt")


def _from_kubeconfig(path: Path, context: str | None) -> bytes | None:
    config = yaml.safe_load(path.read_text())
    if not isinstance(config, dict):
        return None
    contexts = {c.get("name"): c.get("context") or {} for c in config.get("contexts") or ()}
    clusters = {c.get("name"): c.get("cluster") or {} for c in config.get("clusters") or ()}
    chosen = contexts.get(context or config.get("current-context"))
    if chosen is None:
        return None
    cluster = clusters.get(chosen.get("cluster"))
    if not cluster:
        return None
    data = cluster.get("certificate-authority-data")
    if data:
        return base64.b64decode(str(data))
    file = cluster.get("certificate-authority")
    if file:
        ca_path = Path(str(file)).expanduser()
        if not ca_path.is_absolute():
            ca_path = path.parent / ca_path
        return ca_path.read_bytes()
    return None


def cluster_ca(kubeconfig: str | None, context: str | None = None) -> bytes | None:
    """The cluster CA (PEM) of this kubeconfig, or of the pod's service account."""
    try:
        if kubeconfig:
            return _from_kubeconfig(Path(kubeconfig), context)
        if IN_CLUSTER_CA.is_file():
            return IN_CLUSTER_CA.read_bytes()
    except (OSError, yaml.YAMLError, binascii.Error, ValueError) as error:
        log.warning("cannot read the cluster CA", extra={"error": str(error)})
    return None
