"""The pinned e2e suite knows which Kubernetes it is.

`e2e.test` is built with `go build` from the k8s.io/kubernetes module, which (unlike
upstream's `make`) stamps no version: the suite then calls itself
`v0.0.0-master+$Format:%H$` in its log and in `e2e.test --version`, and a report
of the run cannot say which suite ran. The tool folder's `ldflags` stamp the
release the control plane is pinned to, in both version packages the suite reads.
"""

from __future__ import annotations

from pathlib import Path

from vkpy.devcluster import pinned_release

LDFLAGS = Path(__file__).resolve().parents[3] / "controlplane/tools/e2e/ldflags"


def stamped() -> dict[str, str]:
    flags: dict[str, str] = {}
    for line in LDFLAGS.read_text().splitlines():
        if line.startswith("-X "):
            name, _, value = line.removeprefix("-X ").partition("=")
            flags[name] = value
    return flags


def test_the_suite_is_stamped_with_the_pinned_release() -> None:
    release = pinned_release()
    minor = release.split(".")[1]
    flags = stamped()
    for package in ("k8s.io/component-base/version", "k8s.io/client-go/pkg/version"):
        assert flags.get(f"{package}.gitVersion") == release, package
        assert flags.get(f"{package}.gitMajor") == "1", package
        assert flags.get(f"{package}.gitMinor") == minor, package


def test_the_e2e_go_module_is_the_pinned_release() -> None:
    go_mod = (LDFLAGS.parent / "go.mod").read_text()
    assert f"k8s.io/kubernetes {pinned_release()}" in go_mod
