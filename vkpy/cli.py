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
import socket
import sys
from collections.abc import Sequence
from pathlib import Path
from urllib.parse import urlparse

import yaml

from vkpy import __version__
from vkpy import log as vklog
from vkpy.api.config import AUTHORIZATION_MODES
from vkpy.kube.client import ClientOptions
from vkpy.node.node_status import NodeSettings, Taint
from vkpy.node.pod_controller import PodControllerSettings
from vkpy.providers import registry
from vkpy.settings import ApiSettings, Settings

DEFAULT_PROVIDER = "sim"


class UsageError(Exception):
    """A flag or file the user gave is wrong; the message says which and why."""


def _env(name: str, default: str | None = None) -> str | None:
    return os.environ.get("VKPY_" + name.upper().replace("-", "_"), default)


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m vkpy",
        description="vkpy: a virtual kubelet. Registers a Node and runs its pods on a backend.",
        epilog="Every flag can also be set as an environment variable VKPY_<FLAG> "
        "(e.g. VKPY_NODE_NAME); --kubeconfig also reads KUBECONFIG.",
    )
    p.add_argument("--version", action="version", version=f"vkpy {__version__}")
    p.add_argument(
        "--kubeconfig",
        default=_env("kubeconfig", os.environ.get("KUBECONFIG")),
        help="kubeconfig file; without it, the in-cluster service account is used",
    )
    p.add_argument("--context", default=_env("context"), help="kubeconfig context")
    p.add_argument("--node-name", default=_env("node-name", "vkpy"), help="name of the Node")
    p.add_argument(
        "--provider",
        default=_env("provider", DEFAULT_PROVIDER),
        help=f"backend: {', '.join(registry.names())} (default {DEFAULT_PROVIDER})",
    )
    p.add_argument("--provider-config", default=_env("provider-config"), help="YAML or JSON file")
    p.add_argument(
        "--os", default=_env("os"), help="operating system to report (default: backend's)"
    )
    p.add_argument(
        "--taint",
        action="append",
        default=None,
        help="key[=value]:Effect, repeatable; 'none' for no taint "
        "(default virtual-kubelet.io/provider=<provider>:NoSchedule)",
    )
    p.add_argument("--label", action="append", default=None, help="extra node label key=value")
    p.add_argument(
        "--node-ip",
        default=_env("node-ip"),
        help="address the API server dials (default: this host's address towards it)",
    )
    p.add_argument(
        "--listen-address", default=_env("listen-address", "0.0.0.0"), help="kubelet API address"
    )
    p.add_argument("--port", type=int, default=int(_env("port", "10250") or 10250))
    api = p.add_argument_group(
        "kubelet API",
        "TLS, authentication and authorization of the kubelet HTTPS API (--port)",
    )
    api.add_argument(
        "--tls-cert-file",
        default=_env("tls-cert-file"),
        help="serving certificate (PEM, with chain); reloaded when it changes. Without it "
        "and without --rotate-server-certificates, a self-signed one is made in --cert-dir",
    )
    api.add_argument("--tls-private-key-file", default=_env("tls-private-key-file"))
    api.add_argument(
        "--cert-dir",
        default=_env("cert-dir"),
        help="where generated certificates are kept (default <state-dir>/certs)",
    )
    api.add_argument(
        "--rotate-server-certificates",
        nargs="?",
        const="true",
        type=_flag_bool,
        default=_env("rotate-server-certificates", "false"),
        help="get the serving certificate from the cluster with a kubelet-serving CSR "
        "(someone must approve it) and renew it before it expires",
    )
    api.add_argument(
        "--client-ca-file",
        default=_env("client-ca-file"),
        help="CA bundle for client certificates (user = CN, groups = O); default: the "
        "cluster CA of the kubeconfig (or of the in-cluster service account)",
    )
    api.add_argument(
        "--anonymous-auth",
        nargs="?",
        const="true",
        type=_flag_bool,
        default=_env("anonymous-auth", "false"),
        help="serve requests without credentials as system:anonymous (default false)",
    )
    api.add_argument(
        "--authorization-mode",
        choices=list(AUTHORIZATION_MODES),
        default=_env("authorization-mode", "Webhook"),
        help="Webhook: SubjectAccessReview for every request (default); "
        "AlwaysAllow: no authorization, development only",
    )
    api.add_argument(
        "--metrics-bind-address",
        default=_env("metrics-bind-address", "127.0.0.1"),
        help="address of the plain-HTTP /metrics port",
    )
    api.add_argument(
        "--metrics-port",
        type=int,
        default=int(_env("metrics-port", "0") or 0),
        help="plain-HTTP port serving /metrics and /healthz (default 0: off)",
    )
    p.add_argument(
        "--pod-sync-workers",
        type=int,
        default=int(_env("pod-sync-workers", "20") or 20),
        help="pods reconciled at once",
    )
    p.add_argument(
        "--state-dir",
        default=_env("state-dir", str(Path.home() / ".local/state/vkpy")),
        help="where backends keep state that outlives vkpy",
    )
    p.add_argument(
        "--startup-timeout",
        type=float,
        default=float(_env("startup-timeout", "60") or 60),
        help="seconds to keep trying to reach the API server",
    )
    p.add_argument(
        "--node-lease-duration",
        type=int,
        default=int(_env("node-lease-duration", "40") or 40),
        help="Lease duration in seconds; renewed every quarter of it (default 40)",
    )
    p.add_argument(
        "--node-status-interval",
        type=float,
        default=float(_env("node-status-interval", "60") or 60),
        help="seconds between node status heartbeats when nothing changed",
    )
    p.add_argument("--log-format", choices=["text", "json"], default=_env("log-format", "text"))
    p.add_argument(
        "--log-level",
        choices=["debug", "info", "warning", "error"],
        default=_env("log-level", "info"),
    )
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


def _server_host(kubeconfig: str | None) -> str | None:
    if not kubeconfig:
        return os.environ.get("KUBERNETES_SERVICE_HOST")
    try:
        config = yaml.safe_load(Path(kubeconfig).read_text())
        server = config["clusters"][0]["cluster"]["server"]
    except (OSError, KeyError, IndexError, TypeError, yaml.YAMLError):
        return None
    return urlparse(str(server)).hostname


def detect_node_ip(server_host: str | None) -> str:
    """The local address this host uses to reach the API server (no packet is sent)."""
    if not server_host or server_host in ("localhost", "127.0.0.1", "::1"):
        return "127.0.0.1" if server_host != "::1" else "::1"
    try:
        family = socket.AF_INET6 if ":" in server_host else socket.AF_INET
        with socket.socket(family, socket.SOCK_DGRAM) as probe:
            probe.connect((server_host, 443))
            return str(probe.getsockname()[0])
    except OSError:
        return "127.0.0.1"


def settings_from_args(args: argparse.Namespace) -> Settings:
    if args.kubeconfig and not Path(args.kubeconfig).is_file():
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
    if args.pod_sync_workers < 1:
        raise UsageError("--pod-sync-workers must be at least 1")
    node_ip = args.node_ip or detect_node_ip(_server_host(args.kubeconfig))
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
    return Settings(
        kube=ClientOptions(kubeconfig=args.kubeconfig, context=args.context),
        node=node,
        pods=PodControllerSettings(
            node_name=args.node_name, host_ip=node_ip, workers=args.pod_sync_workers
        ),
        api=_api_settings(args),
        provider=args.provider,
        provider_config=_read_provider_config(args.provider_config),
        state_dir=args.state_dir,
        startup_timeout=args.startup_timeout,
    )


def main(argv: Sequence[str] | None = None) -> int:
    args = parser().parse_args(argv)
    vklog.setup(args.log_level, args.log_format)
    try:
        settings = settings_from_args(args)
    except UsageError as error:
        print(f"vkpy: error: {error}", file=sys.stderr)
        return 2
    from vkpy import runner  # noqa: PLC0415 - keeps --help fast

    return asyncio.run(runner.run(settings))
