"""Pull secrets read and matched to images as the kubelet's credential keyring does."""

from __future__ import annotations

import base64
import json
from typing import Any

import pytest

from vkpy.oci.images.credentials import (
    DOCKERCFG,
    DOCKERCONFIGJSON,
    CredentialError,
    keyring_from_logins,
    keyring_from_secrets,
)
from vkpy.oci.images.reference import parse


def b64(text: str) -> str:
    return base64.b64encode(text.encode()).decode()


def secret(name: str, auths: dict[str, Any], kind: str = DOCKERCONFIGJSON) -> dict[str, Any]:
    if kind == DOCKERCONFIGJSON:
        data = {".dockerconfigjson": b64(json.dumps({"auths": auths}))}
    else:
        data = {".dockercfg": b64(json.dumps(auths))}
    return {"metadata": {"name": name}, "type": kind, "data": data}


def users(image: str, *secrets: dict[str, Any]) -> list[str]:
    return [c.username for c in keyring_from_secrets(secrets).lookup(parse(image))]


def test_dockerconfigjson_username_password_and_auth() -> None:
    s = secret(
        "pull",
        {
            "registry.example": {"username": "alice", "password": "pw"},
            "other.example": {"auth": b64("bob:x:y")},
        },
    )
    ring = keyring_from_secrets([s])
    [alice] = ring.lookup(parse("registry.example/app:1"))
    assert (alice.username, alice.password, alice.source) == ("alice", "pw", "pull")
    [bob] = ring.lookup(parse("other.example/app"))
    assert (bob.username, bob.password) == ("bob", "x:y")  # split at the first colon
    assert "pw" not in repr(alice)


def test_dockercfg_and_other_secret_types() -> None:
    cfg = secret("old", {"https://registry.example": {"auth": b64("carol:pw")}}, DOCKERCFG)
    opaque = {"metadata": {"name": "o"}, "type": "Opaque", "data": {"x": b64("y")}}
    assert users("registry.example/app", cfg, opaque) == ["carol"]


def test_host_port_and_path_must_match() -> None:
    s = secret(
        "s",
        {
            "registry.example:5000": {"username": "port"},
            "quay.example/team": {"username": "team"},
            "quay.example": {"username": "host"},
        },
    )
    assert users("registry.example:5000/app", s) == ["port"]
    assert users("registry.example/app", s) == []
    assert users("quay.example/team/app", s) == ["team", "host"]  # most specific first
    assert users("quay.example/else/app", s) == ["host"]


def test_globs_match_one_label_each() -> None:
    s = secret("s", {"*.example.com": {"username": "glob"}})
    assert users("eu.example.com/app", s) == ["glob"]
    assert users("a.eu.example.com/app", s) == []
    assert users("example.com/app", s) == []


def test_docker_hub_keys() -> None:
    hub = secret("hub", {"https://index.docker.io/v1/": {"username": "hubber"}})
    assert users("busybox", hub) == ["hubber"]
    assert users("me/app", hub) == ["hubber"]
    assert users("quay.io/me/app", hub) == []
    plain = secret("plain", {"docker.io": {"username": "d"}})
    assert users("busybox", plain) == ["d"]


def test_v2_path_means_the_host_and_schemes_are_dropped() -> None:
    s = secret("s", {"http://registry.example/v2/": {"username": "v2"}})
    assert users("registry.example/any/app", s) == ["v2"]


def test_several_secrets_all_tried() -> None:
    a = secret("a", {"registry.example": {"username": "first"}})
    b = secret("b", {"registry.example": {"username": "second"}})
    assert users("registry.example/app", a, b) == ["first", "second"]


@pytest.mark.parametrize(
    "data",
    [
        {},
        {".dockerconfigjson": "not base64!"},
        {".dockerconfigjson": b64("[1]")},
        {".dockerconfigjson": b64(json.dumps({"nope": {}}))},
        {".dockerconfigjson": b64(json.dumps({"auths": {"r": {"auth": b64("no-colon")}}}))},
    ],
)
def test_unreadable_secrets_are_named_without_their_content(data: dict[str, str]) -> None:
    bad = {"metadata": {"name": "broken"}, "type": DOCKERCONFIGJSON, "data": data}
    with pytest.raises(CredentialError) as caught:
        keyring_from_secrets([bad])
    assert "broken" in str(caught.value)
    assert "no-colon" not in str(caught.value)


def test_logins_a_backend_is_given() -> None:
    ring = keyring_from_logins(
        [("registry.example:5000", "alice", "pw"), ("*.example.com", "glob", "x"), ("q.io", "", "")]
    )
    assert [c.username for c in ring.lookup(parse("registry.example:5000/app"))] == ["alice"]
    assert [c.username for c in ring.lookup(parse("eu.example.com/app"))] == ["glob"]
    assert ring.lookup(parse("q.io/app")) == []  # an empty login is no login
