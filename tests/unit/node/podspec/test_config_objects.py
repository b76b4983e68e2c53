"""The `optional` rule for ConfigMap and Secret references, the same for env and volumes."""

from __future__ import annotations

import base64
from typing import Any

import pytest

from vkpy.node.podspec.config_objects import ConfigError, Kind, key_value, lookup
from vkpy.node.podspec.env import resolve_env
from vkpy.node.podspec.volumes import resolve_volumes


class Source:
    def __init__(self) -> None:
        self.config_maps = {"cfg": {"data": {"k": "from-cm"}, "binaryData": {"b": "AAE="}}}
        self.secrets = {"sec": {"data": {"k": base64.b64encode(b"from-secret").decode()}}}

    async def get_config_map(self, namespace: str, name: str) -> dict[str, Any] | None:
        return self.config_maps.get(name)

    async def get_secret(self, namespace: str, name: str) -> dict[str, Any] | None:
        return self.secrets.get(name)

    async def list_services(self, namespace: str) -> list[dict[str, Any]]:
        return []


NAMES: dict[Kind, str] = {"ConfigMap": "cfg", "Secret": "sec"}


@pytest.mark.parametrize("kind", ["ConfigMap", "Secret"])
async def test_lookup_rule(kind: Kind) -> None:
    source = Source()
    data = await lookup(source, "ns", kind, NAMES[kind], optional=False)
    assert data is not None and data["k"] in (b"from-cm", b"from-secret")
    assert await lookup(source, "ns", kind, "gone", optional=True) is None
    with pytest.raises(ConfigError, match=f'{kind.lower()} "gone" not found'):
        await lookup(source, "ns", kind, "gone", optional=False)
    where = {"kind": kind, "namespace": "ns", "name": NAMES[kind]}
    assert key_value(data, "nope", optional=True, **where) is None  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match=f"couldn't find key nope in {kind} ns/"):
        key_value(data, "nope", optional=False, **where)  # type: ignore[arg-type]


async def test_binary_config_map_data_is_decoded() -> None:
    data = await lookup(Source(), "ns", "ConfigMap", "cfg", optional=False)
    assert data == {"k": b"from-cm", "b": b"\x00\x01"}


@pytest.mark.parametrize("optional", [True, False])
@pytest.mark.parametrize(("name", "key"), [("gone", "k"), ("cfg", "nope")])
async def test_env_and_volumes_follow_the_same_rule(name: str, key: str, optional: bool) -> None:
    ref = {"name": name, "key": key, "optional": optional}
    pod = {
        "metadata": {"namespace": "ns", "name": "p"},
        "spec": {
            "volumes": [
                {
                    "name": "v",
                    "configMap": {
                        "name": name,
                        "optional": optional,
                        "items": [{"key": key, "path": "f"}],
                    },
                }
            ]
        },
    }
    container = {"name": "c", "env": [{"name": "E", "valueFrom": {"configMapKeyRef": ref}}]}
    outcomes = []
    for resolve in (
        lambda: resolve_env(pod, container, Source(), "127.0.0.1", {}),
        lambda: resolve_volumes(pod, Source(), "127.0.0.1", {}, True),
    ):
        try:
            result = await resolve()
            outcomes.append(("ok", len(result) if isinstance(result, list) else result))
        except ConfigError:
            outcomes.append(("error", None))
    if optional:
        env_ok, volumes_ok = outcomes
        assert env_ok == ("ok", 0)
        assert volumes_ok[0] == "ok"
    else:
        assert outcomes == [("error", None), ("error", None)]
