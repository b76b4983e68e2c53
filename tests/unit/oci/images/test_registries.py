"""The node's per-host registry settings, written as a containers-registries.conf."""

from __future__ import annotations

import tomllib

import pytest

from vkpy.oci.images.registries import (
    Endpoint,
    RegistriesError,
    RegistryHost,
    from_config,
    registries_conf,
)


def test_mirrors_and_insecure_hosts() -> None:
    hosts = from_config(
        {
            "docker.io": {"mirrors": ["http://127.0.0.1:5000", "https://mirror.example/hub/"]},
            "127.0.0.1:5000": {"insecure": True},
        }
    )
    assert hosts == (
        RegistryHost(
            "docker.io",
            (Endpoint("127.0.0.1:5000", True), Endpoint("mirror.example/hub", False)),
        ),
        RegistryHost("127.0.0.1:5000", (), True),
    )
    conf = tomllib.loads(registries_conf(hosts))
    assert conf["unqualified-search-registries"] == []
    hub, local = conf["registry"]
    assert hub["prefix"] == hub["location"] == "docker.io"
    assert hub["mirror"] == [
        {"location": "127.0.0.1:5000", "insecure": True},
        {"location": "mirror.example/hub", "insecure": False},
    ]
    assert local == {"prefix": "127.0.0.1:5000", "location": "127.0.0.1:5000", "insecure": True}


@pytest.mark.parametrize(
    ("raw", "message"),
    [
        ({"docker.io/x": {}}, "not a registry host"),
        ({"docker.io": {"mirror": []}}, "unknown setting"),
        ({"docker.io": {"mirrors": "http://m"}}, "list of URLs"),
        ({"docker.io": {"mirrors": ["ftp://m"]}}, "expected http"),
        ({"docker.io": {"mirrors": ['http://m"x']}}, "not a registry location"),
        ({"docker.io": {"insecure": "yes"}}, "true or false"),
        ({"docker.io": ["x"]}, "expected a mapping"),
    ],
)
def test_bad_settings_say_which(raw: dict[str, object], message: str) -> None:
    with pytest.raises(RegistriesError, match=message):
        from_config(raw)
