"""Environment resolution and $(VAR) expansion as the kubelet does them."""

import base64

import pytest

from vkpy.node.podspec.env import ConfigError, expand, resolve_env
from vkpy.node.podspec.pod_config import service_links


class Objects:
    def __init__(
        self, config_maps: dict[str, dict[str, object]], secrets: dict[str, dict[str, object]]
    ):
        self.config_maps = config_maps
        self.secrets = secrets
        self.services: list[dict[str, object]] = []

    async def get_config_map(self, namespace: str, name: str) -> dict[str, object] | None:
        return self.config_maps.get(name)

    async def get_secret(self, namespace: str, name: str) -> dict[str, object] | None:
        return self.secrets.get(name)

    async def list_services(self, namespace: str) -> list[dict[str, object]]:
        return self.services


POD = {
    "metadata": {"name": "web", "namespace": "shop", "uid": "u-1", "labels": {"app": "web"}},
    "spec": {"nodeName": "vk", "serviceAccountName": "default"},
    "status": {},
}


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("$(A)-$(B)", "1-2"),
        ("$$(A)", "$(A)"),
        ("$(MISSING)", "$(MISSING)"),
        ("cost $5", "cost $5"),
        ("$(A", "$(A"),
        ("end$", "end$"),
    ],
)
def test_expand(text: str, expected: str) -> None:
    assert expand(text, {"A": "1", "B": "2"}) == expected


async def test_values_refs_and_downward_api() -> None:
    objects = Objects(
        {"cfg": {"data": {"color": "blue"}}},
        {"creds": {"data": {"token": base64.b64encode(b"s3cret").decode()}}},
    )
    container = {
        "name": "app",
        "resources": {"limits": {"memory": "64Mi", "cpu": "250m"}},
        "env": [
            {"name": "A", "value": "x"},
            {"name": "B", "value": "$(A)y"},
            {"name": "COLOR", "valueFrom": {"configMapKeyRef": {"name": "cfg", "key": "color"}}},
            {"name": "TOKEN", "valueFrom": {"secretKeyRef": {"name": "creds", "key": "token"}}},
            {"name": "POD", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
            {"name": "APP", "valueFrom": {"fieldRef": {"fieldPath": "metadata.labels['app']"}}},
            {"name": "IP", "valueFrom": {"fieldRef": {"fieldPath": "status.hostIP"}}},
            {
                "name": "MEM",
                "valueFrom": {"resourceFieldRef": {"resource": "limits.memory", "divisor": "1Mi"}},
            },
            {"name": "CPU", "valueFrom": {"resourceFieldRef": {"resource": "limits.cpu"}}},
        ],
    }
    env = dict(await resolve_env(POD, container, objects, "192.0.2.1", {"cpu": "4"}))
    assert env == {
        "A": "x",
        "B": "xy",
        "COLOR": "blue",
        "TOKEN": "s3cret",
        "POD": "web",
        "APP": "web",
        "IP": "192.0.2.1",
        "MEM": "64",
        "CPU": "1",
    }


async def test_env_from_with_prefix_and_later_env_wins() -> None:
    objects = Objects({"cfg": {"data": {"A": "from-map", "B": "b"}}}, {})
    container = {
        "envFrom": [{"configMapRef": {"name": "cfg"}, "prefix": "P_"}],
        "env": [{"name": "P_A", "value": "explicit"}],
    }
    env = await resolve_env(POD, container, objects, "192.0.2.1", {})
    assert dict(env) == {"P_A": "explicit", "P_B": "b"}


async def test_missing_required_config_map_is_a_config_error() -> None:
    container = {
        "env": [{"name": "X", "valueFrom": {"configMapKeyRef": {"name": "nope", "key": "k"}}}]
    }
    with pytest.raises(ConfigError, match='configmap "nope" not found'):
        await resolve_env(POD, container, Objects({}, {}), "192.0.2.1", {})


async def test_missing_optional_reference_is_skipped() -> None:
    ref = {"name": "nope", "key": "k", "optional": True}
    container = {"env": [{"name": "X", "valueFrom": {"secretKeyRef": ref}}]}
    assert await resolve_env(POD, container, Objects({}, {}), "192.0.2.1", {}) == []


async def test_missing_key_is_a_config_error() -> None:
    objects = Objects({"cfg": {"data": {}}}, {})
    container = {
        "env": [{"name": "X", "valueFrom": {"configMapKeyRef": {"name": "cfg", "key": "k"}}}]
    }
    with pytest.raises(ConfigError, match="couldn't find key k"):
        await resolve_env(POD, container, objects, "192.0.2.1", {})


@pytest.mark.parametrize(
    ("resource", "divisor", "expected"),
    [
        ("limits.memory", "0", str(64 * 1024 * 1024)),
        ("limits.cpu", "0", "1"),
        ("requests.cpu", "0", "1"),
        ("limits.cpu", "1m", "250"),
        ("requests.memory", "1Mi", "32"),
    ],
)
async def test_resource_field_ref_zero_divisor_means_one(
    resource: str, divisor: str, expected: str
) -> None:
    """The API server stores an unset divisor as "0"; the kubelet reads it as 1."""
    container = {
        "name": "app",
        "resources": {
            "limits": {"memory": "64Mi", "cpu": "250m"},
            "requests": {"memory": "32Mi", "cpu": "100m"},
        },
        "env": [
            {
                "name": "VALUE",
                "valueFrom": {"resourceFieldRef": {"resource": resource, "divisor": divisor}},
            }
        ],
    }
    env = dict(await resolve_env(POD, container, Objects({}, {}), "192.0.2.1", {}))
    assert env == {"VALUE": expected}


async def test_without_a_container_limit_the_pod_level_limit_then_allocatable() -> None:
    """The upstream spec's pod: pod-level resources, none on the container; a node
    reporting its memory in Ki."""
    pod = {**POD, "spec": {**POD["spec"], "resources": {"limits": {"cpu": "1250m"}}}}
    container = {
        "name": "app",
        "env": [
            {"name": "CPU", "valueFrom": {"resourceFieldRef": {"resource": "limits.cpu"}}},
            {
                "name": "MEM",
                "valueFrom": {"resourceFieldRef": {"resource": "limits.memory", "divisor": "0"}},
            },
        ],
    }
    allocatable = {"cpu": "8", "memory": "24683584Ki"}
    env = dict(await resolve_env(pod, container, Objects({}, {}), "192.0.2.1", allocatable))
    assert env == {"CPU": "2", "MEM": str(24683584 * 1024)}


async def test_services_of_the_namespace_are_variables_the_containers_own_override() -> None:
    """The kubelet's service links (issue 18: "Pods should contain environment
    variables for services" found none)."""
    objects = Objects({}, {})
    objects.services = [
        {
            "metadata": {"name": "foo-service", "namespace": "shop"},
            "spec": {
                "clusterIP": "10.0.0.17",
                "ports": [{"name": "http", "port": 8765, "protocol": "TCP"}],
            },
        },
        {"metadata": {"name": "headless", "namespace": "shop"}, "spec": {"clusterIP": "None"}},
    ]
    links = await service_links(POD, objects)
    container = {
        "name": "app",
        "env": [
            {
                "name": "URL",
                "value": "http://$(FOO_SERVICE_SERVICE_HOST):$(FOO_SERVICE_SERVICE_PORT)",
            },
            {"name": "FOO_SERVICE_PORT", "value": "mine"},
        ],
    }
    env = dict(await resolve_env(POD, container, objects, "192.0.2.1", {}, links))
    assert env["FOO_SERVICE_SERVICE_HOST"] == "10.0.0.17"
    assert env["FOO_SERVICE_SERVICE_PORT"] == "8765"
    assert env["FOO_SERVICE_SERVICE_PORT_HTTP"] == "8765"
    assert env["FOO_SERVICE_PORT_8765_TCP"] == "tcp://10.0.0.17:8765"
    assert env["FOO_SERVICE_PORT_8765_TCP_PROTO"] == "tcp"
    assert env["FOO_SERVICE_PORT_8765_TCP_PORT"] == "8765"
    assert env["FOO_SERVICE_PORT_8765_TCP_ADDR"] == "10.0.0.17"
    assert env["FOO_SERVICE_PORT"] == "mine"  # the container's own wins
    assert env["URL"] == "http://10.0.0.17:8765"
    assert not any(name.startswith("HEADLESS") for name in env)
    off = {**POD, "spec": {**POD["spec"], "enableServiceLinks": False}}
    assert await service_links(off, objects) == []
