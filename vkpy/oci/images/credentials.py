"""Pull secrets, read and matched to an image as the kubelet's credential keyring does.

A pod's `imagePullSecrets` (and its ServiceAccount's) are Secrets of type
`kubernetes.io/dockerconfigjson` (`.dockerconfigjson`: `{"auths": {KEY: ENTRY}}`) or
`kubernetes.io/dockercfg` (`.dockercfg`: `{KEY: ENTRY}`). A KEY is a registry host,
optionally with a scheme, port, path prefix and `*` globs in host labels
(`*.example.com`); `/v1/` and `/v2/` paths mean the host itself, and
`https://index.docker.io/v1/` covers Docker Hub images. Every key that matches is
tried, the most specific first (the kubelet's reverse-sorted index); with none the
pull is anonymous.
"""

from __future__ import annotations

import base64
import binascii
import fnmatch
import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

from vkpy.oci.images.reference import DOCKER_HUB, ImageReference

DOCKERCONFIGJSON = "kubernetes.io/dockerconfigjson"
DOCKERCFG = "kubernetes.io/dockercfg"
_HUB_KEY = "index.docker.io"


@dataclass(frozen=True)
class Credential:
    """One username and password; `repr` never shows the password."""

    username: str
    password: str = field(repr=False)
    source: str = ""  # which secret it came from, for messages


class CredentialError(ValueError):
    """A pull secret that cannot be read; says which and why, never its content."""


@dataclass
class Keyring:
    """Credentials by normalised key, looked up as the kubelet's BasicDockerKeyring."""

    _creds: dict[str, list[Credential]] = field(default_factory=dict)

    def add(self, key: str, credential: Credential) -> None:
        self._creds.setdefault(_normalise_key(key), []).append(credential)

    def lookup(self, ref: ImageReference) -> list[Credential]:
        """Every credential whose key matches `ref`, most specific key first."""
        target = ref.name
        found: list[Credential] = []
        for key in sorted(self._creds, reverse=True):
            if _matches(key, target):
                found.extend(self._creds[key])
        if not found and ref.registry == DOCKER_HUB:
            found.extend(self._creds.get(_HUB_KEY, []))
        return found


def keyring_from_logins(logins: Iterable[tuple[str, str, str]]) -> Keyring:
    """A keyring from (registry key, username, password) triples: what a backend gets
    as a pod's registry logins (vkpy/node/podspec/pull_secrets.py has read the
    Secrets), matched as the keyring matches a Secret's keys."""
    keyring = Keyring()
    for key, username, password in logins:
        if username or password:
            keyring.add(key, Credential(username, password, key))
    return keyring


def keyring_from_secrets(secrets: Iterable[Mapping[str, Any]]) -> Keyring:
    """A keyring from Secret objects as the API gives them (`type`, base64 `data`)."""
    keyring = Keyring()
    for secret in secrets:
        name = str((secret.get("metadata") or {}).get("name", "?"))
        kind = secret.get("type")
        data = secret.get("data") or {}
        if kind == DOCKERCONFIGJSON:
            auths = _decode(name, data, ".dockerconfigjson").get("auths")
            if not isinstance(auths, dict):
                raise CredentialError(f"secret {name}: .dockerconfigjson has no 'auths' object")
        elif kind == DOCKERCFG:
            auths = _decode(name, data, ".dockercfg")
        else:
            continue  # the kubelet ignores other types in imagePullSecrets
        for key, entry in auths.items():
            if isinstance(entry, dict):
                credential = _entry(name, key, entry)
                if credential is not None:
                    keyring.add(key, credential)
    return keyring


def _decode(name: str, data: Mapping[str, Any], item: str) -> dict[str, Any]:
    if item not in data:
        raise CredentialError(f"secret {name}: no {item} key")
    try:
        value = json.loads(base64.b64decode(str(data[item]), validate=True))
    except (binascii.Error, ValueError) as error:
        raise CredentialError(f"secret {name}: {item} is not base64 JSON") from error
    if not isinstance(value, dict):
        raise CredentialError(f"secret {name}: {item} is not a JSON object")
    return value


def _entry(name: str, key: str, entry: Mapping[str, Any]) -> Credential | None:
    username = str(entry.get("username") or "")
    password = str(entry.get("password") or "")
    if entry.get("auth"):  # as the kubelet: `auth` (base64 user:password) wins
        try:
            decoded = base64.b64decode(str(entry["auth"]), validate=True).decode()
        except (binascii.Error, UnicodeDecodeError) as error:
            raise CredentialError(f"secret {name}: the auth of {key!r} is not base64") from error
        username, sep, password = decoded.partition(":")
        if not sep:
            raise CredentialError(f"secret {name}: the auth of {key!r} is not user:password")
    if not username and not password:
        return None
    return Credential(username, password, name)


def _normalise_key(key: str) -> str:
    """host[:port][/path]: scheme dropped, `/v1/` and `/v2/` meaning the host."""
    url = urlsplit(key if "://" in key else f"https://{key}")
    path = url.path
    if path.startswith(("/v1/", "/v2/")):
        path = path[3:]
    host = url.netloc.lower()
    return host if path in ("", "/") else host + path


def _matches(key: str, target: str) -> bool:
    """The kubelet's URLsMatch: same port, same number of host labels each matching
    its glob, and the key's path a prefix of the image's."""
    key_host, _, key_path = key.partition("/")
    target_host, _, target_path = target.partition("/")
    key_name, key_port = _host_port(key_host)
    target_name, target_port = _host_port(target_host)
    if key_port != target_port:
        return False
    key_labels, target_labels = key_name.split("."), target_name.split(".")
    if len(key_labels) != len(target_labels):
        return False
    if not ("/" + target_path).startswith("/" + key_path if key_path else "/"):
        return False
    return all(fnmatch.fnmatchcase(t, k) for k, t in zip(key_labels, target_labels, strict=True))


def _host_port(host: str) -> tuple[str, str]:
    if host.startswith("["):
        end = host.find("]")
        return host[: end + 1], host[end + 2 :]
    name, _, port = host.partition(":")
    return name, port
