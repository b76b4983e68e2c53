"""Image references normalised as the kubelet does, and the default pull policy."""

from __future__ import annotations

import pytest

from vkpy.oci.images.errors import InvalidImageName
from vkpy.oci.images.reference import default_pull_policy, parse

DIGEST = "sha256:" + "ab" * 32


@pytest.mark.parametrize(
    ("given", "normalised"),
    [
        ("busybox", "docker.io/library/busybox:latest"),
        ("busybox:1.36", "docker.io/library/busybox:1.36"),
        ("library/busybox", "docker.io/library/busybox:latest"),
        ("me/app:v1", "docker.io/me/app:v1"),
        ("docker.io/busybox", "docker.io/library/busybox:latest"),
        ("index.docker.io/busybox", "docker.io/library/busybox:latest"),
        ("index.docker.io/me/app", "docker.io/me/app:latest"),
        ("registry.k8s.io/pause:3.10", "registry.k8s.io/pause:3.10"),
        ("localhost/app", "localhost/app:latest"),
        ("localhost:5000/app", "localhost:5000/app:latest"),
        ("127.0.0.1:5000/a/b/c:v-1.2_x", "127.0.0.1:5000/a/b/c:v-1.2_x"),
        ("Registry.Example/app", "Registry.Example/app:latest"),
        (f"busybox@{DIGEST}", f"docker.io/library/busybox@{DIGEST}"),
        (f"quay.io/x/y:1.0@{DIGEST}", f"quay.io/x/y:1.0@{DIGEST}"),
        ("[::1]:5000/app:v", "[::1]:5000/app:v"),
    ],
)
def test_normalised_as_the_kubelet_does(given: str, normalised: str) -> None:
    assert str(parse(given)) == normalised


def test_parts() -> None:
    ref = parse(f"registry.k8s.io:443/e2e/agnhost:2.53@{DIGEST}")
    assert (ref.registry, ref.repository, ref.tag, ref.digest) == (
        "registry.k8s.io:443",
        "e2e/agnhost",
        "2.53",
        DIGEST,
    )
    assert ref.name == "registry.k8s.io:443/e2e/agnhost"
    assert str(ref.with_digest(DIGEST)) == f"registry.k8s.io:443/e2e/agnhost@{DIGEST}"


@pytest.mark.parametrize(
    "bad",
    [
        "",
        " busybox",
        "Busybox",
        "me/App",
        "busybox:",
        "busybox:-tag",
        "busybox@sha256:abc",
        f"busybox@sha256:{'AB' * 32}",
        "busybox@md5",
        "a//b",
        "registry.example/",
        "x" * 300,
    ],
)
def test_invalid_names_are_refused(bad: str) -> None:
    with pytest.raises(InvalidImageName) as caught:
        parse(bad)
    assert caught.value.reason == "InvalidImageName"


@pytest.mark.parametrize(
    ("image", "policy"),
    [
        ("busybox", "Always"),
        ("busybox:latest", "Always"),
        ("registry.example:5000/app", "Always"),
        ("busybox:1.36", "IfNotPresent"),
        (f"busybox@{DIGEST}", "IfNotPresent"),
        (f"busybox:latest@{DIGEST}", "Always"),
    ],
)
def test_default_pull_policy_follows_the_tag(image: str, policy: str) -> None:
    assert default_pull_policy(image) == policy
