"""How to reach and authenticate to the API server: kubeconfig and in-cluster, read here.

kubernetes-asyncio's loader imports the whole generated client (every model and API
class) just to fill a Configuration: 38 MiB of a 90 MiB idle agent, half of vkpy's
resident memory next to kwok's (docs/scale.md). This module reads what nearly every
kubeconfig holds (server, CA, client certificate, bearer token or token file, basic
auth, `insecure-skip-tls-verify`, `tls-server-name`, `proxy-url`) and the in-cluster
service account, and builds one aiohttp session from it. A user with an `exec` or
`auth-provider` plugin (EKS, GKE, OIDC) gets kubernetes-asyncio's loader, imported only
then, which refreshes those credentials (`plugin_access`).

KUBECONFIG path lists merge as kubectl merges them: the first file naming a cluster,
context or user wins, and so does the first `current-context`.
"""

from __future__ import annotations

import base64
import os
import ssl
import tempfile
import time
import urllib.request
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import yaml

SERVICE_ACCOUNT = Path("/var/run/secrets/kubernetes.io/serviceaccount")
TOKEN_REREAD = 60.0
"""Seconds a token file is trusted before it is read again (bound tokens rotate)."""

Headers = Callable[[], Awaitable[Mapping[str, str]]]


class AccessError(Exception):
    """The kubeconfig or the service account cannot say how to reach the API server."""


@dataclass
class Access:
    """Where the API server is and what to present to it."""

    host: str
    ssl_context: ssl.SSLContext | None
    ca_pem: bytes | None = None
    server_hostname: str | None = None
    proxy: str | None = None
    auth: Headers | None = None
    """Coroutine giving the Authorization header(s), or None for certificates only."""
    plugin: object | None = field(default=None, repr=False)
    """kubernetes-asyncio's ApiClient when a credential plugin is in use (it owns the
    session then); see `plugin_access`."""


class _TokenFile:
    """A bearer token read from a file, read again every TOKEN_REREAD seconds."""

    def __init__(self, path: Path) -> None:
        self._path = path
        self._value = ""
        self._read_at = -TOKEN_REREAD

    def _read(self) -> str:
        return self._path.read_text().strip()

    async def __call__(self) -> Mapping[str, str]:
        now = time.monotonic()
        if now - self._read_at >= TOKEN_REREAD:
            self._value = self._read()
            self._read_at = now
        return {"Authorization": f"Bearer {self._value}"}


def _read(path: str) -> bytes:
    return Path(path).read_bytes()


def _static(value: str) -> Headers:
    headers = {"Authorization": value}

    async def auth() -> Mapping[str, str]:
        return headers

    return auth


def _merge(paths: list[Path]) -> dict[str, Any]:
    merged: dict[str, Any] = {"clusters": {}, "contexts": {}, "users": {}, "current-context": ""}
    for path in paths:
        raw = yaml.safe_load(path.read_text()) or {}
        if not isinstance(raw, dict):
            raise AccessError(f"{path}: not a kubeconfig")
        for kind, key in (("clusters", "cluster"), ("contexts", "context"), ("users", "user")):
            for item in raw.get(kind) or []:
                name = item.get("name")
                if name is not None and name not in merged[kind]:
                    merged[kind][name] = (item.get(key) or {}, path.parent)
        if not merged["current-context"] and raw.get("current-context"):
            merged["current-context"] = raw["current-context"]
    return merged


def _data_or_file(section: Mapping[str, Any], key: str, base: Path) -> bytes | None:
    data = section.get(f"{key}-data")
    if data:
        return base64.b64decode(data)
    name = section.get(key)
    if name:
        return (base / str(name)).read_bytes()
    return None


def _temp_file(content: bytes) -> str:
    """ssl loads client certificates from files only; the file is removed at once."""
    handle, name = tempfile.mkstemp(prefix="vkpy-kube-")
    with os.fdopen(handle, "wb") as out:
        out.write(content)
    return name


def _ssl_context(
    ca: bytes | None, cert: bytes | None, key: bytes | None, verify: bool
) -> ssl.SSLContext:
    context = ssl.create_default_context(cadata=ca.decode() if ca else None)
    if cert:
        files = [_temp_file(cert), _temp_file(key or cert)]
        try:
            context.load_cert_chain(files[0], keyfile=files[1])
        finally:
            for name in files:
                os.unlink(name)
    if not verify:
        context.check_hostname = False
        context.verify_mode = ssl.CERT_NONE
    return context


def _env_proxy(host: str) -> str | None:
    """The proxy the environment names for `host` (HTTPS_PROXY, NO_PROXY), read once."""
    parts = urlsplit(host)
    if urllib.request.proxy_bypass_environment(parts.hostname or ""):  # type: ignore[attr-defined]
        return None
    return urllib.request.getproxies_environment().get(parts.scheme or "https")


async def from_kubeconfig(
    kubeconfig: str, context: str | None, max_connections: int = 64
) -> Access:
    """Read a kubeconfig (or a ":"-separated list of them)."""
    access = read_kubeconfig(kubeconfig, context)
    if access is None:
        return await plugin_access(kubeconfig, context, max_connections)
    return access


def read_kubeconfig(kubeconfig: str, context: str | None) -> Access | None:
    """A kubeconfig's Access, or None when its user needs a credential plugin."""
    paths = [Path(p).expanduser() for p in kubeconfig.split(os.pathsep) if p]
    merged = _merge([p for p in paths if p.exists()] or paths[:1])
    name = context or merged["current-context"]
    if name not in merged["contexts"]:
        raise AccessError(f"kubeconfig has no context {name!r}")
    ctx, _ = merged["contexts"][name]
    if ctx.get("cluster") not in merged["clusters"]:
        raise AccessError(f"kubeconfig context {name!r} names no known cluster")
    cluster, cluster_base = merged["clusters"][ctx["cluster"]]
    user, user_base = merged["users"].get(ctx.get("user"), ({}, cluster_base))
    if user.get("exec") or user.get("auth-provider"):
        return None
    host = str(cluster.get("server", "")).rstrip("/")
    if not host:
        raise AccessError(f"kubeconfig cluster {ctx['cluster']!r} has no server")
    ca = _data_or_file(cluster, "certificate-authority", cluster_base)
    verify = not cluster.get("insecure-skip-tls-verify", False)
    cert = _data_or_file(user, "client-certificate", user_base)
    key = _data_or_file(user, "client-key", user_base)
    auth: Headers | None = None
    if user.get("token"):
        auth = _static(f"Bearer {user['token']}")
    elif user.get("tokenFile"):
        auth = _TokenFile(user_base / str(user["tokenFile"]))
    elif user.get("username") and user.get("password"):
        basic = base64.b64encode(f"{user['username']}:{user['password']}".encode()).decode()
        auth = _static(f"Basic {basic}")
    https = host.startswith("https:")
    return Access(
        host=host,
        ssl_context=_ssl_context(ca, cert, key, verify) if https else None,
        ca_pem=ca,
        server_hostname=cluster.get("tls-server-name"),
        proxy=cluster.get("proxy-url") or _env_proxy(host),
        auth=auth,
    )


def in_cluster(environ: Mapping[str, str] = os.environ, root: Path = SERVICE_ACCOUNT) -> Access:
    """The pod's service account: KUBERNETES_SERVICE_HOST/PORT, its token and CA."""
    host, port = environ.get("KUBERNETES_SERVICE_HOST"), environ.get("KUBERNETES_SERVICE_PORT")
    if not host or not port:
        raise AccessError("not in a cluster: KUBERNETES_SERVICE_HOST/PORT are not set")
    token, ca_file = root / "token", root / "ca.crt"
    if not token.is_file() or not ca_file.is_file():
        raise AccessError(f"no service account token or CA in {root}")
    ca = ca_file.read_bytes()
    if ":" in host:
        host = f"[{host}]"
    server = f"https://{host}:{port}"
    return Access(
        host=server,
        ssl_context=_ssl_context(ca, None, None, True),
        ca_pem=ca,
        proxy=_env_proxy(server),
        auth=_TokenFile(token),
    )


async def plugin_access(kubeconfig: str, context: str | None, max_connections: int) -> Access:
    """kubernetes-asyncio's loader, for credential plugins (exec, auth-provider) only."""
    from kubernetes_asyncio import client as k8s_client  # noqa: PLC0415 (38 MiB: only here)
    from kubernetes_asyncio import config as k8s_config  # noqa: PLC0415

    configuration = k8s_client.Configuration()
    await k8s_config.load_kube_config(
        config_file=kubeconfig, context=context, client_configuration=configuration
    )
    configuration.connection_pool_maxsize = max_connections
    api = k8s_client.ApiClient(configuration)

    async def auth() -> Mapping[str, str]:
        headers: dict[str, str] = {}
        await api.update_params_for_auth(headers, [], ["BearerToken"])
        return headers

    ca_file = configuration.ssl_ca_cert
    return Access(
        host=str(configuration.host).rstrip("/"),
        ssl_context=None,
        ca_pem=_read(str(ca_file)) if ca_file else None,
        auth=auth,
        plugin=api,
    )
