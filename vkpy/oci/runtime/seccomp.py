"""A moby-style seccomp profile, as one container's `linux.seccomp` in its OCI spec.

Kubernetes' `seccompProfile: RuntimeDefault` means the profile the container runtime
ships. containerd and CRI-O ship the same moby-format profile; Debian installs CRI-O's
and podman's in containers-common at /usr/share/containers/seccomp.json, and that file
is the node's default here, so vkpy keeps no syscall list of its own. A `Localhost`
profile is a file of the same format.

The format is not the OCI spec's: its rules carry conditions (`includes`/`excludes`
on capabilities, architectures and a minimum kernel) that a runtime applies when it
writes the spec for one container, and its architectures are given as a map from the
native one to the ones it also runs. `to_oci` applies them as containerd and CRI-O do
(a rule applies when the container's bounding set has every capability it includes
and none it excludes, and the node's architecture and kernel match), and keeps the
rest as the OCI spec has it. Pure: the caller gives the node's architecture, kernel
and the container's capabilities.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

RUNTIME_DEFAULT = Path("/usr/share/containers/seccomp.json")
"""containers-common's profile (Debian package `containers-common`)."""

ACTIONS = frozenset(
    {
        "SCMP_ACT_KILL",
        "SCMP_ACT_KILL_PROCESS",
        "SCMP_ACT_KILL_THREAD",
        "SCMP_ACT_TRAP",
        "SCMP_ACT_ERRNO",
        "SCMP_ACT_TRACE",
        "SCMP_ACT_ALLOW",
        "SCMP_ACT_LOG",
        "SCMP_ACT_NOTIFY",
    }
)
OPERATORS = frozenset(
    {
        "SCMP_CMP_NE",
        "SCMP_CMP_LT",
        "SCMP_CMP_LE",
        "SCMP_CMP_EQ",
        "SCMP_CMP_GE",
        "SCMP_CMP_GT",
        "SCMP_CMP_MASKED_EQ",
    }
)

SCMP_ARCH = {
    "x86_64": "SCMP_ARCH_X86_64",
    "aarch64": "SCMP_ARCH_AARCH64",
    "ppc64le": "SCMP_ARCH_PPC64LE",
    "s390x": "SCMP_ARCH_S390X",
    "riscv64": "SCMP_ARCH_RISCV64",
}
"""`uname -m` → libseccomp's name for it."""
GO_ARCH = {
    "x86_64": "amd64",
    "aarch64": "arm64",
    "ppc64le": "ppc64le",
    "s390x": "s390x",
    "riscv64": "riscv64",
}
"""`uname -m` → the name the profile's `includes.arches` uses (Go's)."""


class ProfileError(ValueError):
    """A seccomp profile that cannot be used, with what is wrong in it."""


def load(path: Path) -> dict[str, Any]:
    """A profile file's JSON object; ProfileError naming the file if it is not one."""
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError) as error:
        raise ProfileError(f"seccomp profile {path}: {error}") from error
    if not isinstance(data, dict):
        raise ProfileError(f"seccomp profile {path}: not a JSON object")
    return data


def kernel_version(release: str) -> tuple[int, int]:
    """`6.1.0-18-amd64` or `4.8` as (6, 1)."""
    parts = release.split("-", 1)[0].split(".")
    try:
        return int(parts[0]), int(parts[1]) if len(parts) > 1 else 0
    except ValueError as error:
        raise ProfileError(f"not a kernel version: {release!r}") from error


def to_oci(
    profile: Mapping[str, Any],
    *,
    machine: str,
    kernel: tuple[int, int],
    capabilities: Iterable[str],
) -> dict[str, Any]:
    """The OCI `linux.seccomp` for a container on a node of architecture `machine`
    (`uname -m`) and `kernel`, whose bounding set is `capabilities` (`CAP_...`)."""
    caps = {name if name.startswith("CAP_") else f"CAP_{name}" for name in capabilities}
    default = _action(profile.get("defaultAction"), "defaultAction")
    out: dict[str, Any] = {
        "defaultAction": default,
        "architectures": _architectures(profile, machine),
        "syscalls": [],
    }
    if "defaultErrnoRet" in profile:
        out["defaultErrnoRet"] = _int(profile["defaultErrnoRet"], "defaultErrnoRet")
    if profile.get("flags"):
        out["flags"] = list(profile["flags"])
    go_arch = GO_ARCH.get(machine, machine)
    for index, rule in enumerate(profile.get("syscalls") or []):
        where = f"syscalls[{index}]"
        if not isinstance(rule, Mapping):
            raise ProfileError(f"{where}: not an object")
        if not _applies(rule, go_arch, kernel, caps, where):
            continue
        names = rule.get("names") or ([rule["name"]] if rule.get("name") else [])
        if not names or not all(isinstance(name, str) for name in names):
            raise ProfileError(f"{where}: no syscall names")
        entry: dict[str, Any] = {"names": list(names), "action": _action(rule.get("action"), where)}
        if rule.get("errnoRet") is not None:
            entry["errnoRet"] = _int(rule["errnoRet"], f"{where}.errnoRet")
        if rule.get("args"):
            entry["args"] = [_arg(arg, f"{where}.args") for arg in rule["args"]]
        out["syscalls"].append(entry)
    return out


def _architectures(profile: Mapping[str, Any], machine: str) -> list[str]:
    native = SCMP_ARCH.get(machine)
    if native is None:
        raise ProfileError(f"no seccomp architecture known for this machine ({machine})")
    for entry in profile.get("archMap") or []:
        if entry.get("architecture") == native:
            return [native, *entry.get("subArchitectures", [])]
    listed = profile.get("architectures")
    if listed:
        return list(listed)
    return [native]


def _applies(
    rule: Mapping[str, Any], go_arch: str, kernel: tuple[int, int], caps: set[str], where: str
) -> bool:
    includes = rule.get("includes") or {}
    excludes = rule.get("excludes") or {}
    if includes.get("arches") and go_arch not in includes["arches"]:
        return False
    if excludes.get("arches") and go_arch in excludes["arches"]:
        return False
    if any(cap not in caps for cap in includes.get("caps") or ()):
        return False
    if any(cap in caps for cap in excludes.get("caps") or ()):
        return False
    if includes.get("minKernel"):
        try:
            wanted = kernel_version(str(includes["minKernel"]))
        except ProfileError as error:
            raise ProfileError(f"{where}.includes.minKernel: {error}") from error
        if kernel < wanted:
            return False
    return True


def _action(value: object, where: str) -> str:
    if value not in ACTIONS:
        raise ProfileError(f"{where}: unknown action {value!r}")
    return str(value)


def _int(value: object, where: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ProfileError(f"{where}: not a number: {value!r}")
    return value


def _arg(arg: object, where: str) -> dict[str, Any]:
    if not isinstance(arg, Mapping):
        raise ProfileError(f"{where}: not an object")
    if arg.get("op") not in OPERATORS:
        raise ProfileError(f"{where}: unknown operator {arg.get('op')!r}")
    out = {
        "index": _int(arg.get("index"), f"{where}.index"),
        "value": _int(arg.get("value", 0), f"{where}.value"),
        "op": arg["op"],
    }
    if arg.get("valueTwo"):
        out["valueTwo"] = _int(arg["valueTwo"], f"{where}.valueTwo")
    return out
