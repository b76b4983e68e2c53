"""The command line: `python -m vkpy --kubeconfig ... --node-name ... --provider ...`.

Parses flags (each also read from an environment variable `VKPY_<FLAG>`), checks
them, reads the provider's config file, and hands `Settings` to the runner. Any
mistake ends here with a one-line error and exit status 2, before anything starts.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import secrets
import socket
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import yaml

from vkpy import __version__
from vkpy.api.certs.tls_options import TLSOptionsError, tls_options
from vkpy.api.settings import AUTHORIZATION_MODES, ConnectionLimits
from vkpy.app import event_loop
from vkpy.core import log as vklog
from vkpy.core import open_files
from vkpy.fleet import node_set
from vkpy.fleet.leader import apart_from_node_leases
from vkpy.fleet.settings import ApiSettings, ElectionSettings, Settings
from vkpy.kube.access import SERVICE_ACCOUNT
from vkpy.kube.client import ClientOptions
from vkpy.node.heartbeat.lease import NAMESPACE as NODE_LEASES
from vkpy.node.podspec.admission import SysctlPolicy
from vkpy.node.settings import NodeSettings, PodControllerSettings, Taint
from vkpy.providers import registry

DEFAULT_PROVIDER = "process"
SERVICE_ACCOUNT_NAMESPACE = SERVICE_ACCOUNT / "namespace"
"""In a cluster, the namespace vkpy runs in (the leader Lease's default)."""


class UsageError(Exception):
    """A flag or file the user gave is wrong; the message says which and why."""


def _env(name: str, default: str | None = None) -> str | None:
    return os.environ.get("VKPY_" + name.upper().replace("-", "_"), default)


def _option(
    group: argparse._ActionsContainer, flag: str, help: str, default: str | None = None, **kw: Any
) -> None:
    """Add `--flag` whose default comes from VKPY_<FLAG> (then `default`).

    argparse converts a string default with the option's `type`, so a bad value in the
    environment is reported exactly like a bad flag."""
    group.add_argument(flag, default=_env(flag.removeprefix("--"), default), help=help, **kw)


def default_state_dir(node_name: str) -> str:
    """/var/lib/vkpy/<node> for root (pods run as other users and must traverse it),
    else ~/.local/state/vkpy/<node>: one directory per node, so two nodes on one host
    never share pods or certificates."""
    base = "/var/lib/vkpy" if os.geteuid() == 0 else str(Path.home() / ".local/state/vkpy")
    return str(Path(base) / node_name)


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m vkpy",
        description="vkpy: a virtual kubelet. Registers a Node and runs its pods on a backend.",
        epilog="Every flag can also be set as an environment variable VKPY_<FLAG> "
        "(e.g. VKPY_NODE_NAME); --kubeconfig also reads KUBECONFIG. "
        "`python -m vkpy images import FILE` loads an image archive into the node's store.",
    )
    p.add_argument("--version", action="version", version=f"vkpy {__version__}")
    _option(
        p,
        "--kubeconfig",
        "kubeconfig file; without it, the in-cluster service account is used",
        os.environ.get("KUBECONFIG"),
    )
    _option(p, "--context", "kubeconfig context")
    _option(p, "--node-name", "name of the Node (with --nodes: the names' prefix)", "vkpy")
    _option(
        p,
        "--nodes",
        "serve this many nodes from one process, named <node-name>-<i> (default 0: one "
        "node named --node-name)",
        "0",
        type=int,
    )
    _option(
        p,
        "--node-set",
        "a YAML file listing the nodes to serve: groups of a count and name pattern, or "
        "names, each with labels, taints, capacity and provider_config "
        "(see vkpy/fleet/node_set.py)",
    )
    _option(
        p,
        "--provider",
        f"backend: {', '.join(registry.names())} (default {DEFAULT_PROVIDER})",
        DEFAULT_PROVIDER,
    )
    _option(p, "--provider-config", "the backend's settings, a YAML or JSON file")
    _option(p, "--os", "operating system to report (default: the backend's)")
    p.add_argument(
        "--taint",
        action="append",
        default=None,
        help="key[=value]:Effect, repeatable; 'none' for no taint "
        "(default virtual-kubelet.io/provider=<provider>:NoSchedule)",
    )
    p.add_argument("--label", action="append", default=None, help="extra node label key=value")
    _option(
        p,
        "--allowed-unsafe-sysctls",
        "comma-separated unsafe sysctls or patterns ending in '*' (e.g. 'kernel.msg*,"
        "net.core.somaxconn') that pods may set besides the safe ones; others are "
        "rejected (SysctlForbidden)",
        "",
    )
    _option(
        p,
        "--volume-sync-period",
        "seconds between resolving a running pod's configMap, secret and projected volumes "
        "again (changed objects reach its files)",
        "60",
        type=float,
    )
    _option(p, "--node-ip", "address the API server dials (default: this host's towards it)")
    _option(p, "--listen-address", "kubelet API address", "0.0.0.0")
    _option(p, "--port", "kubelet API port (written to the Node)", "10250", type=int)
    api = p.add_argument_group(
        "kubelet API",
        "TLS, authentication and authorization of the kubelet HTTPS API (--port)",
    )
    _option(
        api,
        "--tls-cert-file",
        "serving certificate (PEM, with chain); reloaded when it changes. Without it "
        "and without --rotate-server-certificates, a self-signed one is made in --cert-dir",
    )
    _option(api, "--tls-private-key-file", "key of --tls-cert-file")
    _option(api, "--cert-dir", "where generated certificates are kept (default <state-dir>/certs)")
    _option(
        api,
        "--rotate-server-certificates",
        "get the serving certificate from the cluster with a kubelet-serving CSR "
        "(someone must approve it) and renew it before it expires",
        "false",
        nargs="?",
        const="true",
        type=_flag_bool,
    )
    _option(
        api,
        "--client-ca-file",
        "CA bundle for client certificates (user = CN, groups = O); default: the "
        "cluster CA of the kubeconfig (or of the in-cluster service account)",
    )
    _option(
        api,
        "--anonymous-auth",
        "serve requests without credentials as system:anonymous (default false)",
        "false",
        nargs="?",
        const="true",
        type=_flag_bool,
    )
    _option(
        api,
        "--authorization-mode",
        "Webhook: SubjectAccessReview for every request (default); "
        "AlwaysAllow: no authorization, development only",
        "Webhook",
        choices=list(AUTHORIZATION_MODES),
    )
    _option(
        api,
        "--tls-min-version",
        "oldest TLS version offered: VersionTLS12 (default) or VersionTLS13",
    )
    _option(
        api,
        "--tls-cipher-suites",
        "comma-separated TLS 1.2 cipher suites, IANA names as the kubelet takes them "
        "(default: the kubelet's, ECDHE with AES-GCM or ChaCha20-Poly1305)",
    )
    _option(
        api,
        "--max-connections",
        "open kubelet API connections at most; more are reset at once (default 1024)",
        "1024",
        type=int,
    )
    _option(
        api,
        "--max-connections-per-client",
        "open kubelet API connections from one client address at most (default 256; the "
        "API server's streams all come from its address)",
        "256",
        type=int,
    )
    _option(api, "--metrics-bind-address", "address of the plain-HTTP /metrics port", "127.0.0.1")
    _option(
        api,
        "--metrics-port",
        "plain-HTTP port serving /metrics and /healthz (default 0: off)",
        "0",
        type=int,
    )
    _option(
        p,
        "--health-port",
        "plain-HTTP port of /healthz (liveness) and /readyz (readiness) for the pod's "
        "probes; every replica answers (default 0: off)",
        "0",
        type=int,
    )
    _option(p, "--health-bind-address", "address of --health-port", "0.0.0.0")
    _option(p, "--pod-sync-workers", "pods reconciled at once (default 50)", "50", type=int)
    _option(
        p,
        "--pod-deletion-cost",
        "write controller.kubernetes.io/pod-deletion-cost=N on this node's ReplicaSet pods "
        "that have none, so a scale-in removes them before others (N < 0); default: off",
        type=int,
    )
    _option(
        p,
        "--state-dir",
        "where backends keep state that outlives vkpy (default /var/lib/vkpy/<node-name> "
        "as root, else ~/.local/state/vkpy/<node-name>)",
    )
    _option(
        p, "--startup-timeout", "seconds to keep trying to reach the API server", "60", type=float
    )
    _option(
        p,
        "--node-lease-duration",
        "Lease duration in seconds; renewed every quarter of it (default 40)",
        "40",
        type=int,
    )
    _option(
        p,
        "--node-status-interval",
        "seconds between node status heartbeats when nothing changed",
        "60",
        type=float,
    )
    election = p.add_argument_group(
        "leader election",
        "run several replicas for one node: one leads (runs the node and serves the "
        "kubelet API), the others wait and take over when it goes",
    )
    _option(
        election,
        "--leader-elect",
        "elect a leader among the replicas with a Lease (default false)",
        "false",
        nargs="?",
        const="true",
        type=_flag_bool,
    )
    _option(
        election,
        "--leader-elect-resource-namespace",
        "namespace of the leader Lease, never kube-node-lease (default: vkpy's own "
        "namespace in a cluster, else default; with a node set, kube-node-lease)",
    )
    _option(
        election, "--leader-elect-resource-name", "name of the leader Lease (default vkpy-<node>)"
    )
    _option(
        election,
        "--leader-elect-identity",
        "this replica's name in the Lease (default: host name and a random suffix)",
    )
    _option(
        election,
        "--leader-elect-lease-duration",
        "seconds a standby waits after the leader's last renewal (default 15; with a "
        "node set, the node Lease duration)",
        type=float,
    )
    _option(
        election,
        "--leader-elect-renew-deadline",
        "seconds the leader keeps writing after its last renewal; less than the lease "
        "duration (default 10; with a node set, three quarters of the lease duration)",
        type=float,
    )
    _option(
        election,
        "--leader-elect-retry-period",
        "seconds between tries to acquire or renew the Lease (default 2; with a node "
        "set, the node Lease renew interval, a quarter of its duration)",
        type=float,
    )
    _option(
        p,
        "--event-loop",
        "asyncio, uvloop (the optional extra vkpy[uvloop]) or auto: uvloop when "
        "installed (default asyncio)",
        "asyncio",
        choices=list(event_loop.CHOICES),
    )
    _option(p, "--log-format", "text (key=value) or json", "text", choices=["text", "json"])
    _option(p, "--log-level", "log level", "info", choices=["debug", "info", "warning", "error"])
    return p


def _flag_bool(text: str) -> bool:
    value = text.strip().lower()
    if value in ("true", "1", "yes", "t"):
        return True
    if value in ("false", "0", "no", "f", ""):
        return False
    raise argparse.ArgumentTypeError(f"want true or false, not {text!r}")


def _api_settings(args: argparse.Namespace) -> ApiSettings:
    if bool(args.tls_cert_file) != bool(args.tls_private_key_file):
        raise UsageError("--tls-cert-file and --tls-private-key-file go together")
    if args.tls_cert_file and args.rotate_server_certificates:
        raise UsageError(
            "--rotate-server-certificates gets the certificate from the cluster; "
            "do not also give --tls-cert-file"
        )
    for flag, path in (
        ("--tls-cert-file", args.tls_cert_file),
        ("--tls-private-key-file", args.tls_private_key_file),
        ("--client-ca-file", args.client_ca_file),
    ):
        if path and not Path(path).is_file():
            raise UsageError(f"{flag} {path}: no such file")
    if not 0 <= args.metrics_port < 65536:
        raise UsageError(f"--metrics-port {args.metrics_port} is not a port number")
    if args.max_connections < 1 or args.max_connections_per_client < 1:
        raise UsageError("--max-connections and --max-connections-per-client must be at least 1")
    limits = ConnectionLimits(
        max_connections=args.max_connections,
        max_connections_per_client=args.max_connections_per_client,
    )
    try:
        tls = tls_options(args.tls_min_version or "", (args.tls_cipher_suites or "").split(","))
    except TLSOptionsError as error:
        raise UsageError(str(error)) from error
    return ApiSettings(
        listen_address=args.listen_address,
        port=args.port,
        tls_cert_file=args.tls_cert_file,
        tls_private_key_file=args.tls_private_key_file,
        cert_dir=args.cert_dir or str(Path(args.state_dir) / "certs"),
        rotate_server_certificates=args.rotate_server_certificates,
        client_ca_file=args.client_ca_file,
        anonymous_auth=args.anonymous_auth,
        authorization_mode=args.authorization_mode,
        metrics_bind_address=args.metrics_bind_address,
        metrics_port=args.metrics_port,
        tls=tls,
        limits=limits,
    )


def _read_provider_config(path: str | None) -> dict[str, object]:
    if not path:
        return {}
    try:
        text = Path(path).read_text()
    except OSError as error:
        raise UsageError(f"cannot read --provider-config {path}: {error.strerror}") from error
    try:
        data = json.loads(text) if path.endswith(".json") else yaml.safe_load(text)
    except (ValueError, yaml.YAMLError) as error:
        raise UsageError(f"--provider-config {path} is not valid YAML/JSON: {error}") from error
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise UsageError(f"--provider-config {path} must hold a mapping")
    return data


def _taints(values: list[str] | None, provider: str) -> tuple[Taint, ...]:
    raw = values if values is not None else (_env("taint") or "").split(",")
    raw = [v.strip() for v in raw if v.strip()]
    if not raw:
        return (Taint("virtual-kubelet.io/provider", provider, "NoSchedule"),)
    if raw == ["none"]:
        return ()
    try:
        return tuple(Taint.parse(v) for v in raw)
    except ValueError as error:
        raise UsageError(str(error)) from error


def _labels(values: list[str] | None) -> dict[str, str]:
    out = {}
    for item in values or []:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise UsageError(f"invalid --label {item!r}: want key=value")
        out[key] = value
    return out


def _unsafe_sysctls(value: str) -> tuple[str, ...]:
    patterns = tuple(part.strip() for part in value.split(",") if part.strip())
    try:
        SysctlPolicy.from_patterns(patterns)
    except ValueError as error:
        raise UsageError(f"--allowed-unsafe-sysctls: {error}") from None
    return patterns


def _kubeconfig_exists(value: str) -> bool:
    """Whether a --kubeconfig (or KUBECONFIG, a ":"-separated list) names a file that
    exists; the API client's loader (the one reader) merges the ones that do."""
    return any(Path(part).expanduser().is_file() for part in value.split(os.pathsep) if part)


def own_namespace() -> str:
    """The namespace vkpy runs in (its ServiceAccount's), or `default` outside a cluster."""
    try:
        return SERVICE_ACCOUNT_NAMESPACE.read_text().strip() or "default"
    except OSError:
        return "default"


def _election(args: argparse.Namespace, node_set: bool) -> ElectionSettings | None:
    """One node: the leader Lease vkpy-<node> in vkpy's own namespace, never among the
    node Leases (defaults 15/10/2 s, client-go's). A node set shared by replicas
    (vkpy.fleet.sharded): the nodes' own Leases, renewed as a kubelet renews its Lease
    (defaults from --node-lease-duration: 40/30/10 s), and the replicas' Leases beside
    them."""
    if not args.leader_elect:
        return None
    identity = args.leader_elect_identity or f"{socket.gethostname()}_{secrets.token_hex(4)}"
    if node_set:
        defaults = (
            float(args.node_lease_duration),
            args.node_lease_duration * 0.75,
            args.node_lease_duration / 4,
        )
    else:
        defaults = (15.0, 10.0, 2.0)
    namespace = args.leader_elect_resource_namespace or (
        NODE_LEASES if node_set else own_namespace()
    )
    try:
        election = ElectionSettings(
            namespace=namespace,
            name=args.leader_elect_resource_name or f"vkpy-{args.node_name}",
            identity=identity,
            lease_duration=_given(args.leader_elect_lease_duration, defaults[0]),
            renew_deadline=_given(args.leader_elect_renew_deadline, defaults[1]),
            retry_period=_given(args.leader_elect_retry_period, defaults[2]),
        )
    except ValueError as error:
        raise UsageError(f"--leader-elect-*: {error}") from error
    if not node_set:
        try:
            apart_from_node_leases(election)
        except ValueError as error:
            raise UsageError(f"--leader-elect-resource-namespace: {error}") from error
    return election


def _given(value: float | None, default: float) -> float:
    return default if value is None else value


def settings_from_args(args: argparse.Namespace) -> Settings:
    if not args.state_dir:
        args.state_dir = default_state_dir(args.node_name)
    if args.kubeconfig and not _kubeconfig_exists(args.kubeconfig):
        raise UsageError(f"--kubeconfig {args.kubeconfig}: no such file")
    if not args.kubeconfig and not os.environ.get("KUBERNETES_SERVICE_HOST"):
        raise UsageError("no --kubeconfig (or KUBECONFIG) and not running in a cluster")
    if args.provider not in registry.names():
        raise UsageError(
            f"unknown --provider {args.provider!r}; known: {', '.join(registry.names())}"
        )
    if not 0 < args.port < 65536:
        raise UsageError(f"--port {args.port} is not a port number")
    if args.node_lease_duration < 4:
        raise UsageError("--node-lease-duration must be at least 4 seconds")
    if not 0 <= args.health_port < 65536:
        raise UsageError(f"--health-port {args.health_port} is not a port number")
    if args.pod_sync_workers < 1:
        raise UsageError("--pod-sync-workers must be at least 1")
    node_ip = args.node_ip or ""  # "": found once the API client is loaded (runner)
    node = NodeSettings(
        name=args.node_name,
        internal_ip=node_ip,
        port=args.port,
        hostname=args.node_name,
        taints=_taints(args.taint, args.provider),
        labels=_labels(args.label),
        operating_system=args.os,
        lease_duration=args.node_lease_duration,
        lease_renew_interval=args.node_lease_duration / 4,
        status_interval=args.node_status_interval,
        check_interval=min(10.0, args.node_status_interval),
    )
    pods = PodControllerSettings(
        node_name=args.node_name,
        host_ip=node_ip,
        workers=args.pod_sync_workers,
        deletion_cost=args.pod_deletion_cost,
        operating_system=args.os,
        allowed_unsafe_sysctls=_unsafe_sysctls(args.allowed_unsafe_sysctls),
        volume_sync_period=max(1.0, args.volume_sync_period),
    )
    provider_config = _read_provider_config(args.provider_config)
    members = _node_set(args, node, pods, provider_config)
    if members and args.port + len(members) - 1 > 65535:
        raise UsageError(
            f"--port {args.port}: the {len(members)} nodes of the set take ports "
            f"{args.port}-{args.port + len(members) - 1}, past 65535"
        )
    return Settings(
        kube=ClientOptions(
            kubeconfig=args.kubeconfig,
            context=args.context,
            max_connections=node_set.api_connections(len(members)),
            max_connections_behind=node_set.api_connections_behind(len(members)),
        ),
        node=node,
        pods=pods,
        node_set=members,
        api=_api_settings(args),
        provider=args.provider,
        provider_config=provider_config,
        state_dir=args.state_dir,
        startup_timeout=args.startup_timeout,
        election=_election(args, bool(members)),
        health_port=args.health_port,
        health_bind_address=args.health_bind_address,
    )


def _node_set(
    args: argparse.Namespace,
    node: NodeSettings,
    pods: PodControllerSettings,
    provider_config: dict[str, object],
) -> tuple[node_set.Member, ...]:
    if args.nodes < 0:
        raise UsageError("--nodes must be 0 or more")
    if args.nodes and args.node_set:
        raise UsageError("give --nodes or --node-set, not both")
    if args.nodes:
        groups: list[object] = [{"count": args.nodes}]
    elif args.node_set:
        try:
            groups = node_set.from_file(yaml.safe_load(Path(args.node_set).read_text()))
        except OSError as error:
            raise UsageError(f"cannot read --node-set {args.node_set}: {error.strerror}") from error
        except (yaml.YAMLError, node_set.NodeSetError) as error:
            raise UsageError(f"--node-set {args.node_set}: {error}") from error
    else:
        return ()
    try:
        return node_set.members(node, pods, provider_config, groups)
    except node_set.NodeSetError as error:
        raise UsageError(f"node set: {error}") from error


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["images"]:  # `python -m vkpy images import FILE`: the node's image store
        from vkpy.oci.images import command  # noqa: PLC0415 - keeps --help fast

        return command.main(argv[1:], default_state_dir)
    args = parser().parse_args(argv)
    vklog.setup(args.log_level, args.log_format)
    try:
        settings = settings_from_args(args)
        loop = event_loop.resolve(args.event_loop)
    except (UsageError, event_loop.EventLoopError) as error:
        print(f"vkpy: error: {error}", file=sys.stderr)
        return 2
    open_files.raise_soft_limit()  # as Go's runtime does for the kubelet
    from vkpy.app import runner  # noqa: PLC0415 - keeps --help fast

    with asyncio.Runner(loop_factory=event_loop.loop_factory(loop)) as run:
        return run.run(runner.run(settings))
