"""What the dev cluster runs: file layout, ports, settings and each component's flags.

Kept apart from the code that starts processes so the command lines can be read (and
tested) as plain data. The flags follow what kubeadm sets for a single control-plane
node, adjusted for a loopback-only cluster that tests drive hard: etcd without fsync,
no leader election, a node lifecycle controller that notices a dead node in seconds.
Everything binds to 127.0.0.1; nothing listens on other interfaces.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from pathlib import Path

from .cluster_pki import FRONT_PROXY_CLIENT, ClusterPKI

LOOPBACK = "127.0.0.1"
ETCD_MEMBER = "vkpy-dev"


@dataclass(frozen=True)
class Settings:
    """How the control plane is configured; every field has a working default."""

    #: Make the API server verify kubelet serving certificates against the kubelet
    #: signing CA (`--kubelet-certificate-authority`). Off by default, like kubeadm.
    verify_kubelet_certs: bool = False
    #: Service ClusterIPs come from here. Never dialled: nothing routes them.
    service_cluster_ip_range: str = "10.0.0.0/24"
    #: How long a node may go without a heartbeat before it is marked Unknown.
    node_monitor_grace_period: str = "20s"
    #: How often the node lifecycle controller checks nodes.
    node_monitor_period: str = "2s"
    #: Seconds `up` waits for each stage (etcd, API server, the rest) to get ready.
    start_timeout: float = 120.0
    #: Seconds between SIGTERM and SIGKILL on `down`.
    stop_grace: float = 5.0
    #: The service-account token issuer, also the accepted API audience.
    service_account_issuer: str = "https://kubernetes.default.svc.cluster.local"


@dataclass(frozen=True)
class Ports:
    """The TCP ports on 127.0.0.1 the components listen on."""

    etcd_client: int
    etcd_peer: int
    apiserver: int
    controller_manager: int
    scheduler: int

    def to_json(self) -> dict[str, int]:
        return asdict(self)

    @classmethod
    def from_json(cls, data: dict[str, int]) -> Ports:
        return cls(**{k: int(v) for k, v in data.items()})


@dataclass(frozen=True)
class Layout:
    """Every path the dev cluster reads or writes, all under one directory."""

    dir: Path

    @property
    def pki(self) -> ClusterPKI:
        return ClusterPKI(self.dir / "pki")

    @property
    def logs(self) -> Path:
        return self.dir / "logs"

    def log(self, component: str) -> Path:
        return self.logs / f"{component}.log"

    @property
    def etcd_data(self) -> Path:
        return self.dir / "etcd"

    @property
    def kubeconfig(self) -> Path:
        """The admin kubeconfig (system:masters)."""
        return self.dir / "kubeconfig"

    @property
    def kubeconfigs(self) -> Path:
        return self.dir / "kubeconfigs"

    @property
    def controller_manager_kubeconfig(self) -> Path:
        return self.kubeconfigs / "controller-manager.kubeconfig"

    @property
    def scheduler_kubeconfig(self) -> Path:
        return self.kubeconfigs / "scheduler.kubeconfig"

    @property
    def apiserver_cert_dir(self) -> Path:
        return self.dir / "apiserver"

    @property
    def state(self) -> Path:
        return self.dir / "state.json"

    @property
    def lock(self) -> Path:
        return self.dir / ".lock"

    def owned_paths(self) -> list[Path]:
        """Everything `down --purge` may delete (never the directory's other content)."""
        return [
            self.pki.dir,
            self.logs,
            self.etcd_data,
            self.kubeconfig,
            self.kubeconfigs,
            self.apiserver_cert_dir,
            self.state,
            self.lock,
            self.dir / "addons.json",
            self.dir / "nodes",
            self.dir / "metrics-server",
            self.dir / "registry",
        ]


def _url(port: int) -> str:
    return f"https://{LOOPBACK}:{port}"


def etcd_args(bin_dir: Path, layout: Layout, ports: Ports) -> list[str]:
    pki = layout.pki
    peer = _url(ports.etcd_peer)
    return [
        str(bin_dir / "etcd"),
        f"--name={ETCD_MEMBER}",
        f"--data-dir={layout.etcd_data}",
        f"--listen-client-urls={_url(ports.etcd_client)}",
        f"--advertise-client-urls={_url(ports.etcd_client)}",
        f"--listen-peer-urls={peer}",
        f"--initial-advertise-peer-urls={peer}",
        f"--initial-cluster={ETCD_MEMBER}={peer}",
        f"--cert-file={pki.etcd.cert}",
        f"--key-file={pki.etcd.key}",
        "--client-cert-auth=true",
        f"--trusted-ca-file={pki.etcd_ca.cert}",
        f"--peer-cert-file={pki.etcd.cert}",
        f"--peer-key-file={pki.etcd.key}",
        "--peer-client-cert-auth=true",
        f"--peer-trusted-ca-file={pki.etcd_ca.cert}",
        # Throwaway data: losing the last writes on a host crash is fine, speed is not.
        "--unsafe-no-fsync=true",
    ]


def apiserver_args(bin_dir: Path, layout: Layout, ports: Ports, settings: Settings) -> list[str]:
    pki = layout.pki
    args = [
        str(bin_dir / "kube-apiserver"),
        f"--bind-address={LOOPBACK}",
        f"--advertise-address={LOOPBACK}",
        # The `kubernetes` Service cannot have a loopback endpoint (Endpoints
        # validation rejects 127.0.0.0/8), so the default lease reconciler would fail
        # every 10 s. Nothing can route to a ClusterIP here anyway: no endpoints.
        "--endpoint-reconciler-type=none",
        f"--secure-port={ports.apiserver}",
        f"--cert-dir={layout.apiserver_cert_dir}",
        f"--tls-cert-file={pki.apiserver.cert}",
        f"--tls-private-key-file={pki.apiserver.key}",
        f"--client-ca-file={pki.ca.cert}",
        *_front_proxy_args(pki),
        f"--etcd-servers={_url(ports.etcd_client)}",
        f"--etcd-cafile={pki.etcd_ca.cert}",
        f"--etcd-certfile={pki.apiserver_etcd_client.cert}",
        f"--etcd-keyfile={pki.apiserver_etcd_client.key}",
        "--authorization-mode=Node,RBAC",
        "--enable-admission-plugins=NodeRestriction",
        "--allow-privileged=true",
        f"--service-cluster-ip-range={settings.service_cluster_ip_range}",
        f"--service-account-issuer={settings.service_account_issuer}",
        f"--api-audiences={settings.service_account_issuer}",
        f"--service-account-key-file={pki.service_account_pub}",
        f"--service-account-signing-key-file={pki.service_account_key}",
        f"--kubelet-client-certificate={pki.apiserver_kubelet_client.cert}",
        f"--kubelet-client-key={pki.apiserver_kubelet_client.key}",
        "--kubelet-preferred-address-types=InternalIP,Hostname",
    ]
    if settings.verify_kubelet_certs:
        args.append(f"--kubelet-certificate-authority={pki.kubelet_ca.cert}")
    return args


def _front_proxy_args(pki: ClusterPKI) -> list[str]:
    """The aggregation layer's proxy identity, as kubeadm configures it.

    Besides letting aggregated APIs (metrics-server) work, this fills in the
    request-header CA of the extension-apiserver-authentication ConfigMap; without it
    the controller-manager and scheduler log an error about it many times a second.
    """
    return [
        f"--requestheader-client-ca-file={pki.front_proxy_ca.cert}",
        f"--requestheader-allowed-names={FRONT_PROXY_CLIENT}",
        "--requestheader-username-headers=X-Remote-User",
        "--requestheader-group-headers=X-Remote-Group",
        "--requestheader-extra-headers-prefix=X-Remote-Extra-",
        f"--proxy-client-cert-file={pki.front_proxy_client.cert}",
        f"--proxy-client-key-file={pki.front_proxy_client.key}",
    ]


def controller_manager_args(
    bin_dir: Path, layout: Layout, ports: Ports, settings: Settings
) -> list[str]:
    pki = layout.pki
    kubeconfig = layout.controller_manager_kubeconfig
    return [
        str(bin_dir / "kube-controller-manager"),
        f"--kubeconfig={kubeconfig}",
        f"--authentication-kubeconfig={kubeconfig}",
        f"--authorization-kubeconfig={kubeconfig}",
        f"--bind-address={LOOPBACK}",
        f"--secure-port={ports.controller_manager}",
        f"--tls-cert-file={pki.controller_manager_serving.cert}",
        f"--tls-private-key-file={pki.controller_manager_serving.key}",
        f"--client-ca-file={pki.ca.cert}",
        "--controllers=*",
        "--leader-elect=false",
        "--use-service-account-credentials=true",
        f"--service-account-private-key-file={pki.service_account_key}",
        f"--root-ca-file={pki.ca.cert}",
        *_signing_args(pki),
        f"--node-monitor-grace-period={settings.node_monitor_grace_period}",
        f"--node-monitor-period={settings.node_monitor_period}",
    ]


def _signing_args(pki: ClusterPKI) -> list[str]:
    """Per-signer CAs for the CSR signing controller.

    kubelet-serving certificates come from the kubelet signing CA (what the API server
    trusts for kubelets); every client-certificate signer uses the cluster CA, so the
    certificates it issues authenticate against `--client-ca-file`. The catch-all
    `--cluster-signing-cert-file` cannot express that split and may not be combined
    with these flags.
    """
    signers = {
        "kubelet-serving": pki.kubelet_ca,
        "kubelet-client": pki.ca,
        "kube-apiserver-client": pki.ca,
        "legacy-unknown": pki.ca,
    }
    args: list[str] = []
    for signer, ca in signers.items():
        args += [
            f"--cluster-signing-{signer}-cert-file={ca.cert}",
            f"--cluster-signing-{signer}-key-file={ca.key}",
        ]
    return args


def scheduler_args(bin_dir: Path, layout: Layout, ports: Ports) -> list[str]:
    pki = layout.pki
    kubeconfig = layout.scheduler_kubeconfig
    return [
        str(bin_dir / "kube-scheduler"),
        f"--kubeconfig={kubeconfig}",
        f"--authentication-kubeconfig={kubeconfig}",
        f"--authorization-kubeconfig={kubeconfig}",
        f"--bind-address={LOOPBACK}",
        f"--secure-port={ports.scheduler}",
        f"--tls-cert-file={pki.scheduler_serving.cert}",
        f"--tls-private-key-file={pki.scheduler_serving.key}",
        f"--client-ca-file={pki.ca.cert}",
        "--leader-elect=false",
    ]
