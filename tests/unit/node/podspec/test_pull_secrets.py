"""imagePullSecrets read into registry logins for backends that pull images (ACI)."""

from __future__ import annotations

import base64
import json

from vkpy.core.objects import KubeObject
from vkpy.node.podspec.pull_secrets import credentials_of, pull_credentials
from vkpy.providers.base import RegistryCredential


def secret(kind: str, document: object) -> KubeObject:
    encoded = base64.b64encode(json.dumps(document).encode()).decode()
    return {"type": f"kubernetes.io/{kind.strip('.')}", "data": {kind: encoded}}


def test_dockerconfigjson_with_username_password_or_auth() -> None:
    auth = base64.b64encode(b"bob:s3cret").decode()
    logins = credentials_of(
        secret(
            ".dockerconfigjson",
            {
                "auths": {
                    "https://myreg.azurecr.io/v1/": {"username": "u", "password": "p"},
                    "ghcr.io": {"auth": auth},
                }
            },
        )
    )
    assert logins == [
        RegistryCredential("myreg.azurecr.io", "u", "p"),
        RegistryCredential("ghcr.io", "bob", "s3cret"),
    ]
    assert "s3cret" not in repr(logins)


def test_old_dockercfg_and_malformed_secrets() -> None:
    old = credentials_of(secret(".dockercfg", {"quay.io": {"username": "a", "password": "b"}}))
    assert old == [RegistryCredential("quay.io", "a", "b")]
    assert credentials_of({"data": {".dockerconfigjson": "!!"}}) == []
    assert credentials_of({"data": {"other": "eA=="}}) == []


class Source:
    def __init__(self, secrets: dict[str, KubeObject]) -> None:
        self.secrets = secrets

    async def get_config_map(self, namespace: str, name: str) -> KubeObject | None:
        return None

    async def get_secret(self, namespace: str, name: str) -> KubeObject | None:
        return self.secrets.get(f"{namespace}/{name}")

    async def list_services(self, namespace: str) -> list[KubeObject]:
        return []


async def test_missing_secrets_are_skipped_like_the_kubelet_does() -> None:
    pod = {
        "metadata": {"namespace": "ns"},
        "spec": {"imagePullSecrets": [{"name": "gone"}, {"name": "reg"}]},
    }
    source = Source(
        {
            "ns/reg": secret(
                ".dockerconfigjson", {"auths": {"r.io": {"username": "u", "password": "p"}}}
            )
        }
    )
    assert await pull_credentials(pod, source) == (RegistryCredential("r.io", "u", "p"),)
