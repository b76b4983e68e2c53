"""metrics-server for the dev cluster: `kubectl top` and the HPA's resource metrics.

The horizontal pod autoscaler and `kubectl top` read `metrics.k8s.io`, which
metrics-server serves as an aggregated API after scraping every kubelet's
`/metrics/resource`. Here it runs as a host process (the pinned release built from
`controlplane/tools/metrics-server/`), and the API server reaches it through an
APIService whose Service is of type ExternalName pointing at `localhost`: the API
server refuses Endpoints on loopback addresses, but resolves an ExternalName to
`<externalName>:<APIService port>` and checks the serving certificate against the
APIService's caBundle under the name `<service>.<namespace>.svc`.

metrics-server checks each kubelet's serving certificate against the kubelet signing
CA (never `--kubelet-insecure-tls`), so the nodes the dev cluster starts get serving
certificates from that CA (see nodes.py), and it presents a client certificate of its
own to the kubelets, which authorize it with a SubjectAccessReview (nodes/metrics).
"""

from __future__ import annotations

import base64
import json
from pathlib import Path
from typing import Any

from .cluster_pki import LOOPBACK_IPS, ClusterPKI
from .components import LOOPBACK
from .pki import CertificateAuthority, CertPaths, write_pem

NAMESPACE = "kube-system"
SERVICE = "metrics-server"
USER = "system:metrics-server"
API_SERVICE = "v1beta1.metrics.k8s.io"
#: How often metrics-server scrapes the kubelets (its minimum is 10 s).
RESOLUTION = "10s"


def _pair(directory: Path, stem: str) -> CertPaths:
    return CertPaths(directory / f"{stem}.crt", directory / f"{stem}.key")


def serving_cert(directory: Path) -> CertPaths:
    return _pair(directory, "serving")


def client_cert(directory: Path) -> CertPaths:
    return _pair(directory, "client")


def write_pki(directory: Path, pki: ClusterPKI) -> None:
    """Serving and client certificates from the cluster CA (kept once written)."""
    serving, client = serving_cert(directory), client_cert(directory)
    if all(p.exists() for p in (serving.cert, serving.key, client.cert, client.key)):
        return
    ca = CertificateAuthority.load(pki.ca.cert, pki.ca.key)
    issued = [
        (
            serving,
            ca.issue(
                SERVICE,
                dns_names=(f"{SERVICE}.{NAMESPACE}.svc", "localhost"),
                ip_addresses=LOOPBACK_IPS,
                server=True,
            ),
        ),
        (client, ca.issue(USER, client=True)),
    ]
    for paths, (cert_pem, key_pem) in issued:
        write_pem(paths.cert, cert_pem)
        write_pem(paths.key, key_pem, secret=True)


def args(binary: Path, directory: Path, kubeconfig: Path, port: int, pki: ClusterPKI) -> list[str]:
    """metrics-server's command line: loopback only, kubelet certificates verified."""
    serving, client = serving_cert(directory), client_cert(directory)
    return [
        str(binary),
        f"--bind-address={LOOPBACK}",
        f"--secure-port={port}",
        f"--cert-dir={directory}",
        f"--tls-cert-file={serving.cert}",
        f"--tls-private-key-file={serving.key}",
        f"--kubeconfig={kubeconfig}",
        f"--authentication-kubeconfig={kubeconfig}",
        f"--authorization-kubeconfig={kubeconfig}",
        f"--kubelet-certificate-authority={pki.kubelet_ca.cert}",
        f"--kubelet-client-certificate={client.cert}",
        f"--kubelet-client-key={client.key}",
        "--kubelet-preferred-address-types=InternalIP,Hostname",
        # The nodes' kubelet ports differ (several on one host), so use each Node's.
        "--kubelet-use-node-status-port",
        f"--metric-resolution={RESOLUTION}",
        # Must stay below 90% of the resolution (its default, 10 s, would not).
        "--kubelet-request-timeout=5s",
    ]


def manifests(port: int, ca_cert: Path) -> list[dict[str, Any]]:
    """RBAC for metrics-server's user, the ExternalName Service and the APIService."""
    user = {"kind": "User", "name": USER, "apiGroup": "rbac.authorization.k8s.io"}

    def role_ref(kind: str, name: str) -> dict[str, str]:
        return {"kind": kind, "name": name, "apiGroup": "rbac.authorization.k8s.io"}

    rbac = "rbac.authorization.k8s.io/v1"
    return [
        {
            "apiVersion": rbac,
            "kind": "ClusterRole",
            "metadata": {"name": USER},
            "rules": [
                {"apiGroups": [""], "resources": ["nodes/metrics"], "verbs": ["get"]},
                {
                    "apiGroups": [""],
                    "resources": ["pods", "nodes"],
                    "verbs": ["get", "list", "watch"],
                },
            ],
        },
        {
            "apiVersion": rbac,
            "kind": "ClusterRoleBinding",
            "metadata": {"name": USER},
            "roleRef": role_ref("ClusterRole", USER),
            "subjects": [user],
        },
        {
            "apiVersion": rbac,
            "kind": "ClusterRoleBinding",
            "metadata": {"name": "metrics-server:system:auth-delegator"},
            "roleRef": role_ref("ClusterRole", "system:auth-delegator"),
            "subjects": [user],
        },
        {
            "apiVersion": rbac,
            "kind": "RoleBinding",
            "metadata": {"name": "metrics-server-auth-reader", "namespace": NAMESPACE},
            "roleRef": role_ref("Role", "extension-apiserver-authentication-reader"),
            "subjects": [user],
        },
        {
            "apiVersion": rbac,
            "kind": "ClusterRole",
            "metadata": {
                "name": "system:aggregated-metrics-reader",
                "labels": {
                    "rbac.authorization.k8s.io/aggregate-to-view": "true",
                    "rbac.authorization.k8s.io/aggregate-to-edit": "true",
                    "rbac.authorization.k8s.io/aggregate-to-admin": "true",
                },
            },
            "rules": [
                {
                    "apiGroups": ["metrics.k8s.io"],
                    "resources": ["pods", "nodes"],
                    "verbs": ["get", "list", "watch"],
                }
            ],
        },
        {
            "apiVersion": "v1",
            "kind": "Service",
            "metadata": {"name": SERVICE, "namespace": NAMESPACE},
            "spec": {"type": "ExternalName", "externalName": "localhost"},
        },
        {
            "apiVersion": "apiregistration.k8s.io/v1",
            "kind": "APIService",
            "metadata": {"name": API_SERVICE},
            "spec": {
                "group": "metrics.k8s.io",
                "version": "v1beta1",
                "service": {"name": SERVICE, "namespace": NAMESPACE, "port": port},
                "caBundle": base64.b64encode(ca_cert.read_bytes()).decode(),
                "groupPriorityMinimum": 100,
                "versionPriority": 100,
            },
        },
    ]


def manifest_list(port: int, ca_cert: Path) -> str:
    """`manifests` as one JSON List for `kubectl apply -f -`."""
    return json.dumps({"apiVersion": "v1", "kind": "List", "items": manifests(port, ca_cert)})


def available(api_service: dict[str, Any]) -> bool:
    conditions = api_service.get("status", {}).get("conditions", [])
    return any(c.get("type") == "Available" and c.get("status") == "True" for c in conditions)
