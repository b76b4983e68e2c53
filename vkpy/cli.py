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
        api=ApiSettings(listen_address=args.listen_address, port=args.port),
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
