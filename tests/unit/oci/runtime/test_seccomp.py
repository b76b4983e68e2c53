"""The runtime default seccomp profile, applied for one container as containerd does."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from vkpy.oci.runtime import seccomp, spec

DEFAULT_CAPS = spec.DEFAULT_CAPABILITIES


def rules_for(out: dict[str, Any], name: str) -> list[dict[str, Any]]:
    return [rule for rule in out["syscalls"] if name in rule["names"]]


@pytest.fixture(scope="module")
def runtime_default() -> dict[str, Any]:
    """The node's RuntimeDefault: containers-common's file (Debian
    golang-github-containers-common), the profile CRI-O and podman use."""
    return seccomp.load(seccomp.RUNTIME_DEFAULT)


def test_runtime_default_on_x86_64(runtime_default: dict[str, Any]) -> None:
    out = seccomp.to_oci(
        runtime_default, machine="x86_64", kernel=(6, 1), capabilities=DEFAULT_CAPS
    )
    assert out["defaultAction"] == "SCMP_ACT_ERRNO"
    assert out["architectures"] == ["SCMP_ARCH_X86_64", "SCMP_ARCH_X86", "SCMP_ARCH_X32"]
    # x86's own calls are allowed, another architecture's are not in the filter at all
    assert rules_for(out, "arch_prctl")[0]["action"] == "SCMP_ACT_ALLOW"
    assert not rules_for(out, "s390_runtime_instr")
    # without CAP_SYS_ADMIN, quotactl fails with EPERM; without CAP_SYS_MODULE, init_module
    assert [(r["action"], r.get("errnoRet")) for r in rules_for(out, "quotactl")] == [
        ("SCMP_ACT_ERRNO", 1)
    ]
    assert [r["action"] for r in rules_for(out, "init_module")] == ["SCMP_ACT_ERRNO"]
    # personality only with the values the profile lists, as arguments of the rule
    values = [r["args"][0]["value"] for r in rules_for(out, "personality")]
    assert 0 in values and 0x40000 not in values


def test_runtime_default_follows_granted_capabilities(runtime_default: dict[str, Any]) -> None:
    caps = [*DEFAULT_CAPS, "CAP_SYS_ADMIN"]
    out = seccomp.to_oci(runtime_default, machine="x86_64", kernel=(6, 1), capabilities=caps)
    assert [r["action"] for r in rules_for(out, "quotactl")] == ["SCMP_ACT_ALLOW"]


def test_runtime_default_on_arm64(runtime_default: dict[str, Any]) -> None:
    out = seccomp.to_oci(runtime_default, machine="aarch64", kernel=(6, 1), capabilities=())
    assert out["architectures"] == ["SCMP_ARCH_AARCH64", "SCMP_ARCH_ARM"]
    assert not rules_for(out, "arch_prctl")
    assert rules_for(out, "set_tls")


def test_conditions_on_kernel_arches_and_excluded_caps() -> None:
    profile = {
        "defaultAction": "SCMP_ACT_ERRNO",
        "architectures": ["SCMP_ARCH_X86_64"],
        "syscalls": [
            {"names": ["new_call"], "action": "SCMP_ACT_ALLOW", "includes": {"minKernel": "5.8"}},
            {"names": ["not_x86"], "action": "SCMP_ACT_ALLOW", "excludes": {"arches": ["amd64"]}},
            {
                "names": ["no_admin"],
                "action": "SCMP_ACT_ERRNO",
                "errnoRet": 1,
                "excludes": {"caps": ["CAP_SYS_ADMIN"]},
            },
        ],
    }
    old = seccomp.to_oci(profile, machine="x86_64", kernel=(5, 4), capabilities=())
    assert [r["names"] for r in old["syscalls"]] == [["no_admin"]]
    assert old["architectures"] == ["SCMP_ARCH_X86_64"]
    new = seccomp.to_oci(profile, machine="x86_64", kernel=(5, 10), capabilities=["SYS_ADMIN"])
    assert [r["names"] for r in new["syscalls"]] == [["new_call"]]


def test_kernel_version() -> None:
    assert seccomp.kernel_version("6.18.44-fc-v1252") == (6, 18)
    assert seccomp.kernel_version("4.8") == (4, 8)
    with pytest.raises(seccomp.ProfileError):
        seccomp.kernel_version("six")


@pytest.mark.parametrize(
    ("profile", "message"),
    [
        ({"defaultAction": "SCMP_ACT_MAYBE"}, "unknown action"),
        ({"defaultAction": "SCMP_ACT_ALLOW", "syscalls": [{"action": "SCMP_ACT_ALLOW"}]}, "names"),
        (
            {
                "defaultAction": "SCMP_ACT_ALLOW",
                "syscalls": [
                    {"names": ["x"], "action": "SCMP_ACT_ALLOW", "args": [{"index": 0, "op": "?"}]}
                ],
            },
            "operator",
        ),
    ],
)
def test_a_bad_profile_says_what_is_wrong(profile: dict[str, Any], message: str) -> None:
    with pytest.raises(seccomp.ProfileError, match=message):
        seccomp.to_oci(profile, machine="x86_64", kernel=(6, 1), capabilities=())


def test_an_unknown_machine_is_refused() -> None:
    with pytest.raises(seccomp.ProfileError, match="sparc"):
        seccomp.to_oci(
            {"defaultAction": "SCMP_ACT_ALLOW"}, machine="sparc", kernel=(6, 1), capabilities=()
        )


def test_load_names_the_file_it_cannot_use(tmp_path: Path) -> None:
    bad = tmp_path / "profile.json"
    bad.write_text("[1, 2]")
    with pytest.raises(seccomp.ProfileError, match=str(bad)):
        seccomp.load(bad)
    bad.write_text("{")
    with pytest.raises(seccomp.ProfileError, match=str(bad)):
        seccomp.load(bad)
    good = tmp_path / "good.json"
    good.write_text(json.dumps({"defaultAction": "SCMP_ACT_LOG"}))
    assert seccomp.load(good) == {"defaultAction": "SCMP_ACT_LOG"}
