"""Per-registry-host settings: mirrors tried before the host, and plain-HTTP hosts.

containerd reads these from `hosts.toml`; skopeo (containers/image) reads the same
facts from a containers-registries.conf(5) version 2 file, which this module writes
from the node's config:

    registries:
      docker.io:        {mirrors: ["http://127.0.0.1:5000"]}
      registry.k8s.io:  {mirrors: ["https://mirror.example.com/k8s"]}
      127.0.0.1:5000:   {insecure: true}

A mirror is a URL: `http://` means plain HTTP (`insecure`), `https://` or none means
TLS; a path after the host is a namespace on the mirror. Mirrors are tried in order
for pulls by tag and by digest, then the host itself. Images are always pulled by
fully qualified name, so no short-name search list is written.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

_LOCATION = re.compile(r"[A-Za-z0-9.\-\[\]:]+(?:/[a-z0-9._\-/]+)?")


class RegistriesError(ValueError):
    """The node's registry settings are wrong; says which host and why."""


@dataclass(frozen=True)
class Endpoint:
    location: str  # host[:port][/namespace]
    insecure: bool = False


@dataclass(frozen=True)
class RegistryHost:
    host: str
    mirrors: tuple[Endpoint, ...] = ()
    insecure: bool = False


def endpoint(url: str) -> Endpoint:
    """`http://h:p/ns` → Endpoint("h:p/ns", insecure=True); no scheme means TLS."""
    parts = urlsplit(url if "://" in url else f"https://{url}")
    if parts.scheme not in ("http", "https") or parts.query or parts.fragment:
        raise RegistriesError(f"mirror {url!r}: expected http(s)://host[:port][/path]")
    location = parts.netloc + parts.path.rstrip("/")
    if not _LOCATION.fullmatch(location):
        raise RegistriesError(f"mirror {url!r}: not a registry location")
    return Endpoint(location, insecure=parts.scheme == "http")


def from_config(raw: Mapping[str, Any] | None) -> tuple[RegistryHost, ...]:
    """The `registries:` mapping of a node's config, checked."""
    hosts = []
    for host, given in (raw or {}).items():
        if not isinstance(host, str) or not _LOCATION.fullmatch(host) or "/" in host:
            raise RegistriesError(f"registries: {host!r} is not a registry host")
        settings = given or {}
        if not isinstance(settings, Mapping):
            raise RegistriesError(f"registries.{host}: expected a mapping")
        unknown = set(settings) - {"mirrors", "insecure"}
        if unknown:
            raise RegistriesError(f"registries.{host}: unknown setting(s) {sorted(unknown)}")
        mirrors = settings.get("mirrors") or []
        if not isinstance(mirrors, list) or not all(isinstance(m, str) for m in mirrors):
            raise RegistriesError(f"registries.{host}.mirrors: expected a list of URLs")
        insecure = settings.get("insecure", False)
        if not isinstance(insecure, bool):
            raise RegistriesError(f"registries.{host}.insecure: expected true or false")
        hosts.append(RegistryHost(host, tuple(endpoint(m) for m in mirrors), insecure))
    return tuple(hosts)


def registries_conf(hosts: tuple[RegistryHost, ...]) -> str:
    """A containers-registries.conf(5) v2 file for `hosts`."""
    lines = [
        "# Written by vkpy from the node's registries setting.",
        "unqualified-search-registries = []",
    ]
    for host in hosts:
        lines += [
            "",
            "[[registry]]",
            f"prefix = {_string(host.host)}",
            f"location = {_string(host.host)}",
            f"insecure = {_bool(host.insecure)}",
        ]
        for mirror in host.mirrors:
            lines += [
                "",
                "[[registry.mirror]]",
                f"location = {_string(mirror.location)}",
                f"insecure = {_bool(mirror.insecure)}",
            ]
    return "\n".join(lines) + "\n"


def _string(value: str) -> str:
    return json.dumps(value)  # a TOML basic string for these characters


def _bool(value: bool) -> str:
    return "true" if value else "false"
