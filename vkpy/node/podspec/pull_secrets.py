"""A pod's `imagePullSecrets` as registry logins, for backends that pull images.

The kubelet reads each Secret named in `imagePullSecrets` (type
kubernetes.io/dockerconfigjson, or the older dockercfg) and tries its logins when
pulling. Backends that pull for themselves (ACI) get the same logins in
`PodConfig.registry_credentials`. As with the kubelet, a missing or unreadable
Secret is skipped (logged), never an error: the pull may still work without it.
"""

from __future__ import annotations

import base64
import binascii
import json
import logging

from vkpy.core.objects import KubeObject, meta, spec
from vkpy.node.podspec.config_objects import ObjectSource
from vkpy.providers.base import RegistryCredential

log = logging.getLogger(__name__)


def _logins(auths: object) -> list[RegistryCredential]:
    out: list[RegistryCredential] = []
    if not isinstance(auths, dict):
        return out
    for server, entry in auths.items():
        if not isinstance(entry, dict):
            continue
        username = str(entry.get("username") or "")
        password = str(entry.get("password") or "")
        if not (username and password) and entry.get("auth"):
            try:
                username, _, password = base64.b64decode(str(entry["auth"])).decode().partition(":")
            except (binascii.Error, UnicodeDecodeError):
                continue
        if username and password:
            host = str(server).removeprefix("https://").removeprefix("http://").split("/")[0]
            out.append(RegistryCredential(server=host, username=username, password=password))
    return out


def credentials_of(secret: KubeObject) -> list[RegistryCredential]:
    """The logins of one pull Secret (none when it is of another type or malformed)."""
    data = secret.get("data") or {}
    for key, nested in ((".dockerconfigjson", True), (".dockercfg", False)):
        if key not in data:
            continue
        try:
            document = json.loads(base64.b64decode(data[key]))
        except (binascii.Error, ValueError):
            return []
        return _logins(document.get("auths") if nested else document)
    return []


async def pull_credentials(pod: KubeObject, source: ObjectSource) -> tuple[RegistryCredential, ...]:
    namespace = str(meta(pod).get("namespace") or "default")
    found: dict[str, RegistryCredential] = {}
    for ref in spec(pod).get("imagePullSecrets") or []:
        name = str(ref.get("name") or "")
        if not name:
            continue
        secret = await source.get_secret(namespace, name)
        if secret is None:
            log.warning(
                "image pull secret not found, pulling without it",
                extra={"namespace": namespace, "secret": name},
            )
            continue
        for login in credentials_of(secret):
            found.setdefault(login.server, login)
    return tuple(found.values())
