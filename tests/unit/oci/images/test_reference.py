"""Image references normalised as the kubelet does, and the default pull policy."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

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


_component = st.from_regex(r"[a-z0-9]{1,6}(?:(?:[_-]|__)[a-z0-9]{1,6}){0,2}", fullmatch=True)
_host = st.one_of(
    st.just(""),
    st.from_regex(r"[a-z0-9]{1,8}\.[a-z]{2,5}(?::[0-9]{2,5})?", fullmatch=True),
    st.just("localhost:5000"),
)
_tag = st.one_of(st.none(), st.from_regex(r"[A-Za-z0-9_][A-Za-z0-9_.-]{0,20}", fullmatch=True))
_digest = st.one_of(st.none(), st.from_regex(r"sha256:[0-9a-f]{64}", fullmatch=True))


@given(_host, st.lists(_component, min_size=1, max_size=3), _tag, _digest)
def test_normalising_is_idempotent_and_keeps_the_parts(
    host: str, path: list[str], tag: str | None, digest: str | None
) -> None:
    image = "/".join([host, *path] if host else path)
    if tag:
        image += f":{tag}"
    if digest:
        image += f"@{digest}"
    ref = parse(image)
    assert parse(str(ref)) == ref
    assert ref.digest == digest
    assert ref.tag == (tag or (None if digest else "latest"))
    assert ref.registry == (host or "docker.io")
    assert ref.repository.endswith("/".join(path))
