"""Kubeconfig files for the dev cluster's users.

The admin, the controller-manager and the scheduler each reach the API server with
their own client certificate; a kubeconfig is how every Kubernetes client is told
the server, the CA to trust and the credentials to present. Certificates are
embedded so a kubeconfig stays valid when copied elsewhere.
"""

from __future__ import annotations

import base64
from pathlib import Path

import yaml

from .pki import CertPaths, write_pem

CONTEXT = "vkpy-dev"


def _b64(path: Path) -> str:
    return base64.b64encode(path.read_bytes()).decode()


def kubeconfig_text(server: str, ca_cert: Path, client: CertPaths, user: str) -> str:
    """A kubeconfig with one cluster, one user and one (current) context."""
    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [
            {
                "name": CONTEXT,
                "cluster": {"server": server, "certificate-authority-data": _b64(ca_cert)},
            }
        ],
        "users": [
            {
                "name": user,
                "user": {
                    "client-certificate-data": _b64(client.cert),
                    "client-key-data": _b64(client.key),
                },
            }
        ],
        "contexts": [{"name": CONTEXT, "context": {"cluster": CONTEXT, "user": user}}],
        "current-context": CONTEXT,
        "preferences": {},
    }
    return yaml.safe_dump(config, sort_keys=False)


def write_kubeconfig(path: Path, server: str, ca_cert: Path, client: CertPaths, user: str) -> None:
    """Write a kubeconfig (mode 0600: it holds a private key)."""
    write_pem(path, kubeconfig_text(server, ca_cert, client, user).encode(), secret=True)


def kubeconfig_server(path: Path) -> str:
    """The server URL of a kubeconfig's current context."""
    config = yaml.safe_load(path.read_text())
    if not isinstance(config, dict):
        raise ValueError(f"{path} is not a kubeconfig")
    contexts = {c["name"]: c["context"] for c in config.get("contexts") or []}
    clusters = {c["name"]: c["cluster"] for c in config.get("clusters") or []}
    current = config.get("current-context")
    cluster_name = contexts[current]["cluster"] if current in contexts else None
    if cluster_name not in clusters:
        raise ValueError(f"{path}: no cluster for the current context {current!r}")
    return str(clusters[cluster_name]["server"])
