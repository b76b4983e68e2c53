"""Volume contents resolved as the kubelet does: items, modes, optional, tokens, paths."""

from __future__ import annotations

import base64
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from vkpy.node.podspec.env import ConfigError
from vkpy.node.podspec.volumes import (
    TokenGrant,
    TokenTracker,
    check_path,
    has_token_volumes,
    resolve_volumes,
    token_grant,
    token_request,
)

NOW = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)


class Objects:
    def __init__(self, config_maps: dict[str, Any], secrets: dict[str, Any]) -> None:
        self.config_maps = config_maps
        self.secrets = secrets
        self.token_requests: list[dict[str, Any]] = []

    async def get_config_map(self, namespace: str, name: str) -> dict[str, Any] | None:
        return self.config_maps.get(name)

    async def get_secret(self, namespace: str, name: str) -> dict[str, Any] | None:
        return self.secrets.get(name)

    async def list_services(self, namespace: str) -> list[dict[str, Any]]:
        return []

    async def request_token(
        self,
        namespace: str,
        service_account: str,
        *,
        audience: str | None,
        expiration_seconds: int,
        pod_name: str,
        pod_uid: str,
    ) -> TokenGrant:
        self.token_requests.append(
            {
                "namespace": namespace,
                "service_account": service_account,
                "audience": audience,
                "seconds": expiration_seconds,
                "pod": (pod_name, pod_uid),
            }
        )
        return TokenGrant(
            f"token-{len(self.token_requests)}",
            NOW + timedelta(seconds=expiration_seconds),
            expiration_seconds,
        )


OBJECTS = Objects(
    {
        "cfg": {"data": {"color": "blue", "size": "L"}, "binaryData": {"raw": "AAE="}},
        "kube-root-ca.crt": {"data": {"ca.crt": "PEM"}},
    },
    {"creds": {"data": {"password": base64.b64encode(b"s3cret").decode()}}},
)


def pod(*volumes: dict[str, Any], **spec: Any) -> dict[str, Any]:
    return {
        "metadata": {
            "name": "web",
            "namespace": "shop",
            "uid": "u-1",
            "labels": {"app": "web", "tier": "front"},
            "annotations": {"note": 'say "hi"'},
        },
        "spec": {
            "nodeName": "vk",
            "containers": [{"name": "app", "resources": {"limits": {"memory": "64Mi"}}}],
            "volumes": list(volumes),
            **spec,
        },
        "status": {},
    }


async def files(*volumes: dict[str, Any], objects: Objects = OBJECTS) -> dict[str, Any]:
    resolved = await resolve_volumes(pod(*volumes), objects, "10.0.0.1", {"memory": "1Gi"})
    return {v.name: {f.path: (f.data, oct(f.mode)) for f in v.files} for v in resolved}


async def test_config_map_all_keys_and_items_with_modes() -> None:
    everything = await files({"name": "c", "configMap": {"name": "cfg"}})
    assert everything["c"] == {
        "color": (b"blue", "0o644"),
        "raw": (b"\x00\x01", "0o644"),
        "size": (b"L", "0o644"),
    }
    some = await files(
        {
            "name": "c",
            "configMap": {
                "name": "cfg",
                "defaultMode": 0o600,
                "items": [
                    {"key": "color", "path": "a/b/color"},
                    {"key": "size", "path": "s", "mode": 0o444},
                ],
            },
        }
    )
    assert some["c"] == {"a/b/color": (b"blue", "0o600"), "s": (b"L", "0o444")}


async def test_secret_is_decoded_with_its_default_mode() -> None:
    got = await files({"name": "s", "secret": {"secretName": "creds", "defaultMode": 0o400}})
    assert got["s"] == {"password": (b"s3cret", "0o400")}


async def test_an_azure_file_volume_carries_the_secret_it_names() -> None:
    objects = Objects(
        {},
        {
            "storage": {
                "data": {
                    "azurestorageaccountname": base64.b64encode(b"acct").decode(),
                    "azurestorageaccountkey": base64.b64encode(b"a2V5").decode(),
                }
            }
        },
    )
    share = {"name": "data", "azureFile": {"secretName": "storage", "shareName": "files"}}
    got = await files(share, objects=objects)
    assert {path: data for path, (data, _) in got["data"].items()} == {
        "azurestorageaccountname": b"acct",
        "azurestorageaccountkey": b"a2V5",
    }
    with pytest.raises(ConfigError, match='secret "storage" not found'):
        await files(share)


async def test_missing_objects_and_keys() -> None:
    with pytest.raises(ConfigError, match='configmap "nope" not found'):
        await files({"name": "c", "configMap": {"name": "nope"}})
    assert (await files({"name": "c", "configMap": {"name": "nope", "optional": True}})) == {
        "c": {}
    }
    with pytest.raises(ConfigError, match="couldn't find key missing in ConfigMap shop/cfg"):
        await files(
            {"name": "c", "configMap": {"name": "cfg", "items": [{"key": "missing", "path": "m"}]}}
        )
    with pytest.raises(ConfigError, match='secret "gone" not found'):
        await files({"name": "s", "secret": {"secretName": "gone"}})


async def test_downward_api_fields_maps_and_resources() -> None:
    got = await files(
        {
            "name": "d",
            "downwardAPI": {
                "items": [
                    {"path": "labels", "fieldRef": {"fieldPath": "metadata.labels"}},
                    {"path": "annotations", "fieldRef": {"fieldPath": "metadata.annotations"}},
                    {"path": "name", "fieldRef": {"fieldPath": "metadata.name"}, "mode": 0o400},
                    {"path": "app", "fieldRef": {"fieldPath": "metadata.labels['app']"}},
                    {
                        "path": "mem",
                        "resourceFieldRef": {
                            "containerName": "app",
                            "resource": "limits.memory",
                            "divisor": "1Mi",
                        },
                    },
                ]
            },
        }
    )
    assert got["d"] == {
        "labels": (b'app="web"\ntier="front"', "0o644"),
        "annotations": (b'note="say \\"hi\\""', "0o644"),
        "name": (b"web", "0o400"),
        "app": (b"web", "0o644"),
        "mem": (b"64", "0o644"),
    }


async def test_projected_sources_and_bound_token() -> None:
    objects = Objects(OBJECTS.config_maps, OBJECTS.secrets)
    volume = {
        "name": "kube-api-access",
        "projected": {
            "defaultMode": 0o444,
            "sources": [
                {"serviceAccountToken": {"expirationSeconds": 3607, "path": "token"}},
                {
                    "configMap": {
                        "name": "kube-root-ca.crt",
                        "items": [{"key": "ca.crt", "path": "ca.crt"}],
                    }
                },
                {
                    "downwardAPI": {
                        "items": [
                            {"path": "namespace", "fieldRef": {"fieldPath": "metadata.namespace"}}
                        ]
                    }
                },
                {
                    "secret": {
                        "name": "creds",
                        "items": [{"key": "password", "path": "pw", "mode": 0o400}],
                    }
                },
                {"serviceAccountToken": {"audience": "vault", "path": "vault-token"}},
            ],
        },
    }
    tracker = TokenTracker(objects)
    resolved = await resolve_volumes(pod(volume, serviceAccountName="robot"), tracker, "h", {})
    got = {f.path: (f.data, oct(f.mode)) for f in resolved[0].files}
    assert got == {
        "token": (b"token-1", "0o444"),
        "ca.crt": (b"PEM", "0o444"),
        "namespace": (b"shop", "0o444"),
        "pw": (b"s3cret", "0o400"),
        "vault-token": (b"token-2", "0o444"),
    }
    assert objects.token_requests[0] == {
        "namespace": "shop",
        "service_account": "robot",
        "audience": None,
        "seconds": 3607,
        "pod": ("web", "u-1"),
    }
    assert objects.token_requests[1]["audience"] == "vault"
    assert objects.token_requests[1]["seconds"] == 3600
    # The earliest renewal: 80% through the 3600 s token.
    assert tracker.refresh_at == NOW + timedelta(seconds=2880)
    assert has_token_volumes(pod(volume))
    assert not has_token_volumes(pod({"name": "e", "emptyDir": {}}))


async def test_other_kinds_pass_through_with_their_spec() -> None:
    resolved = await resolve_volumes(
        pod(
            {"name": "e", "emptyDir": {"medium": "Memory"}},
            {"name": "h", "hostPath": {"path": "/srv"}},
            {"name": "p", "persistentVolumeClaim": {"claimName": "data"}},
        ),
        OBJECTS,
        "h",
        {},
    )
    assert [(v.name, v.kind, v.source, v.files) for v in resolved] == [
        ("e", "emptyDir", {"medium": "Memory"}, ()),
        ("h", "hostPath", {"path": "/srv"}, ()),
        ("p", "persistentVolumeClaim", {"claimName": "data"}, ()),
    ]


@pytest.mark.parametrize(
    ("path", "problem"),
    [
        ("/etc/passwd", "must be relative"),
        ("../up", "must not contain '..'"),
        ("a/../../b", "must not contain '..'"),
        ("", "empty path"),
        ("a\x00b", "NUL"),
    ],
)
def test_bad_paths_are_refused(path: str, problem: str) -> None:
    with pytest.raises(ConfigError, match=problem):
        check_path(path, "volume 'v'")


def test_good_paths_are_kept() -> None:
    assert check_path("a/b/c", "v") == "a/b/c"
    assert check_path("..data-like", "v") == "..data-like"
    assert check_path("dir/", "v") == "dir"


async def test_an_item_path_with_dots_fails_the_pod() -> None:
    with pytest.raises(ConfigError, match="must not contain"):
        await files(
            {"name": "c", "configMap": {"name": "cfg", "items": [{"key": "color", "path": "../x"}]}}
        )


def test_token_renewal_time_is_the_kubelets() -> None:
    short = TokenGrant("t", NOW + timedelta(hours=1), 3600)
    assert short.refresh_at() == NOW + timedelta(minutes=48)
    long = TokenGrant("t", NOW + timedelta(days=365), 365 * 86400)
    issued = NOW
    assert long.refresh_at() == issued + timedelta(hours=24)


def test_token_request_and_answer() -> None:
    body = token_request(None, 3607, "web", "u-1")
    assert body["spec"] == {
        "audiences": [],
        "expirationSeconds": 3607,
        "boundObjectRef": {"apiVersion": "v1", "kind": "Pod", "name": "web", "uid": "u-1"},
    }
    assert token_request("vault", 600, "web", "u-1")["spec"]["audiences"] == ["vault"]
    grant = token_grant(
        {
            "spec": {"expirationSeconds": 3607},
            "status": {"token": "abc", "expirationTimestamp": "2026-11-30T13:00:07Z"},
        },
        3607,
    )
    assert grant.token == "abc"
    assert grant.expires_at == datetime(2026, 11, 30, 13, 0, 7, tzinfo=UTC)
    assert grant.lifetime_seconds == 3607
    assert "abc" not in repr(grant)
    with pytest.raises(ConfigError):
        token_grant({"status": {}}, 600)
