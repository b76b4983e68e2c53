"""The dev cluster's PKI: which certificates exist, who signs them, where they live.

A kubeadm-like control plane needs a cluster CA (trusted by the API server for client
certificates), a CA for kubelet serving certificates (used by the controller-manager
to sign approved CSRs and by the API server to verify kubelets), a CA that only etcd
trusts, and one certificate per component. This module lays them out in one
directory and creates them once, so a restarted cluster keeps its identity.
"""

from __future__ import annotations

import ipaddress
import os
from dataclasses import dataclass, replace
from pathlib import Path

from cryptography import x509

from .pki import (
    CertificateAuthority,
    CertPaths,
    key_to_pem,
    new_rsa_key,
    public_key_to_pem,
    write_pem,
)

#: SANs of the API server's serving certificate: loopback plus the in-cluster names.
APISERVER_DNS_NAMES = (
    "localhost",
    "kubernetes",
    "kubernetes.default",
    "kubernetes.default.svc",
    "kubernetes.default.svc.cluster.local",
)
LOOPBACK_IPS = ("127.0.0.1", "::1")
#: The `kubernetes` Service's ClusterIP: the first address of the default
#: `service_cluster_ip_range` (components.Settings). The API server's certificate
#: names it, as kubeadm's does, for clients that reach it there (service_ip.py).
KUBERNETES_SERVICE_IP = "10.0.0.1"
#: Where pods with a network of their own reach the API server (pod_network.py:
#: a relay on the host's loopback device); the certificate names it too.
POD_NETWORK_API_IP = "10.244.0.1"
#: Every address the API server's certificate names.
APISERVER_IPS = (*LOOPBACK_IPS, KUBERNETES_SERVICE_IP, POD_NETWORK_API_IP)
#: CN of the aggregation proxy's client certificate (`--requestheader-allowed-names`).
FRONT_PROXY_CLIENT = "front-proxy-client"


@dataclass(frozen=True)
class ClusterPKI:
    """The file layout of the dev cluster's PKI (all under one directory).

    Four authorities: `ca` is the cluster CA (the API server's `--client-ca-file`,
    signs every control-plane certificate); `kubelet_ca` signs kubelet serving
    certificates (the controller-manager's kubelet-serving signer, and the API
    server's `--kubelet-certificate-authority` when verification is on); `etcd_ca`
    is trusted only by etcd, so no certificate the cluster CA or a CSR produces can
    talk to etcd directly; `front_proxy_ca` vouches for the API server's aggregation
    proxy (`--requestheader-client-ca-file`), which components with delegated
    authentication (controller-manager, scheduler, aggregated APIs such as
    metrics-server) read from the extension-apiserver-authentication ConfigMap.
    """

    dir: Path

    def _pair(self, stem: str) -> CertPaths:
        return CertPaths(self.dir / f"{stem}.crt", self.dir / f"{stem}.key")

    @property
    def ca(self) -> CertPaths:
        return self._pair("ca")

    @property
    def kubelet_ca(self) -> CertPaths:
        return self._pair("kubelet-ca")

    @property
    def etcd_ca(self) -> CertPaths:
        return self._pair("etcd-ca")

    @property
    def front_proxy_ca(self) -> CertPaths:
        return self._pair("front-proxy-ca")

    @property
    def front_proxy_client(self) -> CertPaths:
        return self._pair("front-proxy-client")

    @property
    def apiserver(self) -> CertPaths:
        return self._pair("apiserver")

    @property
    def apiserver_kubelet_client(self) -> CertPaths:
        return self._pair("apiserver-kubelet-client")

    @property
    def apiserver_etcd_client(self) -> CertPaths:
        return self._pair("apiserver-etcd-client")

    @property
    def etcd(self) -> CertPaths:
        return self._pair("etcd")

    @property
    def admin(self) -> CertPaths:
        return self._pair("admin")

    @property
    def controller_manager(self) -> CertPaths:
        return self._pair("controller-manager")

    @property
    def scheduler(self) -> CertPaths:
        return self._pair("scheduler")

    @property
    def controller_manager_serving(self) -> CertPaths:
        return self._pair("controller-manager-serving")

    @property
    def scheduler_serving(self) -> CertPaths:
        return self._pair("scheduler-serving")

    @property
    def service_account_key(self) -> Path:
        return self.dir / "sa.key"

    @property
    def service_account_pub(self) -> Path:
        return self.dir / "sa.pub"

    def exists(self) -> bool:
        """True when every file is present (an interrupted write starts over)."""
        return all(p.exists() for p in self._all_files())

    def _all_files(self) -> list[Path]:
        pairs = [
            self.ca,
            self.kubelet_ca,
            self.etcd_ca,
            self.front_proxy_ca,
            self.front_proxy_client,
            self.apiserver,
            self.apiserver_kubelet_client,
            self.apiserver_etcd_client,
            self.etcd,
            self.admin,
            self.controller_manager,
            self.scheduler,
            self.controller_manager_serving,
            self.scheduler_serving,
        ]
        files = [p for pair in pairs for p in (pair.cert, pair.key)]
        return [*files, self.service_account_key, self.service_account_pub]


@dataclass(frozen=True)
class _LeafSpec:
    """One leaf certificate of the cluster PKI: who issues it and what it says."""

    paths: CertPaths
    common_name: str
    organizations: tuple[str, ...] = ()
    dns_names: tuple[str, ...] = ()
    ip_addresses: tuple[str, ...] = ()
    client: bool = False
    server: bool = False


def _serving(
    paths: CertPaths,
    name: str,
    dns: tuple[str, ...] = ("localhost",),
    ips: tuple[str, ...] = LOOPBACK_IPS,
) -> _LeafSpec:
    return _LeafSpec(paths, name, dns_names=dns, ip_addresses=ips, server=True)


def _client(paths: CertPaths, user: str, groups: tuple[str, ...] = ()) -> _LeafSpec:
    return _LeafSpec(paths, user, organizations=groups, client=True)


def _leaf_specs(pki: ClusterPKI) -> list[tuple[str, _LeafSpec]]:
    """(issuing authority, spec) for every leaf certificate."""
    masters = ("system:masters",)
    return [
        (
            "ca",
            _serving(
                pki.apiserver,
                "kube-apiserver",
                APISERVER_DNS_NAMES,
                APISERVER_IPS,
            ),
        ),
        ("ca", _client(pki.apiserver_kubelet_client, "kube-apiserver-kubelet-client", masters)),
        ("ca", _client(pki.admin, "kubernetes-admin", masters)),
        ("ca", _client(pki.controller_manager, "system:kube-controller-manager")),
        ("ca", _client(pki.scheduler, "system:kube-scheduler")),
        ("ca", _serving(pki.controller_manager_serving, "kube-controller-manager")),
        ("ca", _serving(pki.scheduler_serving, "kube-scheduler")),
        # etcd uses one certificate for its client port and for peer traffic.
        ("etcd_ca", replace(_serving(pki.etcd, "etcd"), client=True)),
        ("etcd_ca", _client(pki.apiserver_etcd_client, "kube-apiserver-etcd-client")),
        ("front_proxy_ca", _client(pki.front_proxy_client, FRONT_PROXY_CLIENT)),
    ]


def write_cluster_pki(directory: Path) -> ClusterPKI:
    """Create the whole PKI in `directory`, or keep it if it is already complete.

    Keeping it lets a stopped cluster restart with the same identity (kubeconfigs
    handed out earlier stay valid, service-account tokens keep verifying).
    """
    pki = ClusterPKI(directory)
    if pki.exists():
        _renew_stale_leaves(pki)
        return pki
    directory.mkdir(parents=True, exist_ok=True)
    os.chmod(directory, 0o700)
    authorities = {
        "ca": CertificateAuthority.create("vkpy-dev-cluster-ca"),
        "kubelet_ca": CertificateAuthority.create("vkpy-dev-kubelet-signing-ca"),
        "etcd_ca": CertificateAuthority.create("vkpy-dev-etcd-ca"),
        "front_proxy_ca": CertificateAuthority.create("vkpy-dev-front-proxy-ca"),
    }
    for attr, authority in authorities.items():
        paths: CertPaths = getattr(pki, attr)
        authority.write(paths.cert, paths.key)
    for issuer, spec in _leaf_specs(pki):
        _issue(authorities[issuer], spec)
    sa_key = new_rsa_key()
    write_pem(pki.service_account_key, key_to_pem(sa_key), secret=True)
    write_pem(pki.service_account_pub, public_key_to_pem(sa_key))
    return pki


def _issue(authority: CertificateAuthority, spec: _LeafSpec) -> None:
    cert_pem, key_pem = authority.issue(
        spec.common_name,
        organizations=spec.organizations,
        dns_names=spec.dns_names,
        ip_addresses=spec.ip_addresses,
        client=spec.client,
        server=spec.server,
    )
    write_pem(spec.paths.cert, cert_pem)
    write_pem(spec.paths.key, key_pem, secret=True)


def _renew_stale_leaves(pki: ClusterPKI) -> None:
    """Issue again, from the same authority, a serving certificate of a PKI made
    before an address was added to its names (POD_NETWORK_API_IP): the identity of
    the cluster (its CAs, the service-account key) stays."""
    for issuer, spec in _leaf_specs(pki):
        if not spec.server or names_ips(spec.paths.cert, spec.ip_addresses):
            continue
        paths: CertPaths = getattr(pki, issuer)
        _issue(CertificateAuthority.load(paths.cert, paths.key), spec)


def names_ips(path: Path, ips: tuple[str, ...]) -> bool:
    """Whether the certificate at `path` names every address in `ips`."""
    try:
        cert = x509.load_pem_x509_certificate(path.read_bytes())
        names = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    except (OSError, ValueError, x509.ExtensionNotFound):
        return False
    have = {str(ip) for ip in names.get_values_for_type(x509.IPAddress)}
    return {str(ipaddress.ip_address(ip)) for ip in ips} <= have
