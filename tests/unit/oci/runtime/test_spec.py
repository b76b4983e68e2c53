"""The OCI spec generated for a container: what runc will be asked to build."""

from __future__ import annotations

from typing import Any

import pytest

from vkpy.oci.runtime import spec

X86 = spec.Platform(machine="x86_64", kernel=(6, 1))
PROFILE: dict[str, Any] = {
    "defaultAction": "SCMP_ACT_ERRNO",
    "defaultErrnoRet": 38,
    "archMap": [
        {"architecture": "SCMP_ARCH_X86_64", "subArchitectures": ["SCMP_ARCH_X86"]},
    ],
    "syscalls": [
        {"names": ["read", "write"], "action": "SCMP_ACT_ALLOW"},
        {"names": ["chroot"], "action": "SCMP_ACT_ALLOW", "includes": {"caps": ["CAP_SYS_CHROOT"]}},
    ],
}
UNCONFINED = spec.Security(seccomp=spec.Seccomp("Unconfined"))


def make(**fields: Any) -> dict[str, Any]:
    fields.setdefault("process", spec.Process(args=["/bin/true"]))
    fields.setdefault("rootfs", "/images/rootfs")
    fields.setdefault("security", UNCONFINED)
    platform = fields.pop("platform", X86)
    return spec.generate(spec.Container(**fields), platform)


def test_process_user_env_cwd_and_terminal() -> None:
    process = spec.Process(
        args=["/bin/sh", "-c", "id"],
        env={"PATH": "/bin", "GREETING": "a=b"},
        cwd="/work",
        uid=10001,
        gid=3000,
        additional_gids=(4000, 5000),
        terminal=True,
    )
    out = make(process=process)["process"]
    assert out["args"] == ["/bin/sh", "-c", "id"]
    assert out["env"] == ["PATH=/bin", "GREETING=a=b"]
    assert out["cwd"] == "/work"
    assert out["user"] == {"uid": 10001, "gid": 3000, "additionalGids": [3000, 4000, 5000]}
    assert out["terminal"] is True


@pytest.mark.parametrize(
    "process",
    [
        spec.Process(args=[]),
        spec.Process(args=["x"], cwd="relative"),
        spec.Process(args=["x"], env={"A=B": "c"}),
        spec.Process(args=["x"], env={"A": "nul\0"}),
        spec.Process(args=["x"], uid=-1),
    ],
)
def test_a_process_that_cannot_run_is_refused(process: spec.Process) -> None:
    with pytest.raises(spec.SpecError):
        make(process=process)


def test_the_default_capabilities_are_containerds_held_only_by_root() -> None:
    root = make()["process"]
    assert root["capabilities"]["bounding"] == list(spec.DEFAULT_CAPABILITIES)
    assert root["capabilities"]["effective"] == list(spec.DEFAULT_CAPABILITIES)
    assert "inheritable" not in root["capabilities"]
    assert "ambient" not in root["capabilities"]
    user = make(process=spec.Process(args=["x"], uid=1000))["process"]
    assert user["capabilities"]["bounding"] == list(spec.DEFAULT_CAPABILITIES)
    assert user["capabilities"]["effective"] == []
    assert user["capabilities"]["permitted"] == []


def test_capabilities_drop_then_add_as_the_cri_does() -> None:
    security = spec.Security(capabilities_drop=["ALL"], capabilities_add=["NET_ADMIN", "chown"])
    assert spec.capabilities(security) == ["CAP_NET_ADMIN", "CAP_CHOWN"]
    security = spec.Security(capabilities_drop=["KILL", "CAP_NET_RAW"])
    kept = spec.capabilities(security)
    assert "CAP_KILL" not in kept and "CAP_NET_RAW" not in kept and "CAP_CHOWN" in kept
    assert spec.capabilities(spec.Security(capabilities_add=["ALL"])) == list(spec.ALL_CAPABILITIES)
    with pytest.raises(spec.SpecError, match="unknown capability"):
        spec.capabilities(spec.Security(capabilities_add=["FLY"]))


def test_no_new_privileges_when_privilege_escalation_is_not_allowed() -> None:
    assert make()["process"]["noNewPrivileges"] is False
    security = spec.Security(allow_privilege_escalation=False, seccomp=spec.Seccomp("Unconfined"))
    assert make(security=security)["process"]["noNewPrivileges"] is True


def test_privileged_only_where_the_node_allows_it() -> None:
    privileged = spec.Security(privileged=True, seccomp=spec.Seccomp("RuntimeDefault", PROFILE))
    with pytest.raises(spec.SpecError, match="privileged"):
        make(security=privileged)
    out = make(security=privileged, platform=spec.Platform("x86_64", (6, 1), True))
    assert out["process"]["capabilities"]["bounding"] == list(spec.ALL_CAPABILITIES)
    assert "seccomp" not in out["linux"]
    assert "maskedPaths" not in out["linux"] and "readonlyPaths" not in out["linux"]
    sys_mount = next(m for m in out["mounts"] if m["destination"] == "/sys")
    assert "ro" not in sys_mount["options"]


def test_masked_and_readonly_paths_are_containerds() -> None:
    linux = make()["linux"]
    assert "/proc/kcore" in linux["maskedPaths"] and "/sys/firmware" in linux["maskedPaths"]
    assert "/proc/sys" in linux["readonlyPaths"]
    assert "/proc/sysrq-trigger" in linux["readonlyPaths"]


def test_standard_mounts_with_sys_and_cgroup_read_only() -> None:
    mounts = {m["destination"]: m for m in make()["mounts"]}
    assert list(mounts) == [
        "/proc",
        "/dev",
        "/dev/pts",
        "/dev/shm",
        "/dev/mqueue",
        "/sys",
        "/sys/fs/cgroup",
    ]
    assert mounts["/proc"]["type"] == "proc"
    assert mounts["/sys"]["type"] == "sysfs" and "ro" in mounts["/sys"]["options"]
    assert mounts["/sys/fs/cgroup"]["type"] == "cgroup"
    assert "ro" in mounts["/sys/fs/cgroup"]["options"]


def test_a_user_namespace_without_its_own_network_binds_the_hosts_sys() -> None:
    mapping = spec.pod_mapping(300000)
    out = make(namespaces={"user": None}, uid_mappings=mapping, gid_mappings=mapping)
    sys_mount = next(m for m in out["mounts"] if m["destination"] == "/sys")
    assert sys_mount["source"] == "/sys" and "rbind" in sys_mount["options"]
    assert "ro" in sys_mount["options"]


def test_volumes_are_bind_mounts_read_only_when_asked() -> None:
    volumes = [
        spec.BindMount("/var/lib/vkpy/pods/a/volumes/data", "/data"),
        spec.BindMount("/var/lib/vkpy/pods/a/volumes/config", "/etc/app", read_only=True),
    ]
    mounts = {m["destination"]: m for m in make(volumes=volumes)["mounts"]}
    assert mounts["/data"]["source"] == "/var/lib/vkpy/pods/a/volumes/data"
    assert mounts["/data"]["type"] == "bind"
    assert "rbind" in mounts["/data"]["options"] and "ro" not in mounts["/data"]["options"]
    assert "ro" in mounts["/etc/app"]["options"]


@pytest.mark.parametrize(
    "volume",
    [
        spec.BindMount("relative", "/data"),
        spec.BindMount("/src", "data"),
        spec.BindMount("/s", "/a/../b"),
    ],
)
def test_a_volume_at_a_bad_path_is_refused(volume: spec.BindMount) -> None:
    with pytest.raises(spec.SpecError):
        make(volumes=[volume])


def test_read_only_root_filesystem() -> None:
    assert make()["root"] == {"path": "/images/rootfs", "readonly": False}
    security = spec.Security(read_only_root=True, seccomp=spec.Seccomp("Unconfined"))
    assert make(security=security)["root"]["readonly"] is True
    with pytest.raises(spec.SpecError, match="absolute"):
        make(rootfs="images/rootfs")


def test_namespaces_new_or_joined_and_always_a_mount_namespace() -> None:
    mapping = spec.pod_mapping(300000)
    out = make(
        namespaces={
            "network": "/proc/42/ns/net",
            "user": "/proc/42/ns/user",
            "ipc": "/proc/42/ns/ipc",
            "uts": "/proc/42/ns/uts",
            "pid": None,
        },
        uid_mappings=mapping,
        gid_mappings=mapping,
    )
    assert out["linux"]["namespaces"] == [
        {"type": "pid"},
        {"type": "network", "path": "/proc/42/ns/net"},
        {"type": "ipc", "path": "/proc/42/ns/ipc"},
        {"type": "uts", "path": "/proc/42/ns/uts"},
        {"type": "mount"},
        {"type": "user", "path": "/proc/42/ns/user"},
    ]
    assert out["linux"]["uidMappings"] == [{"containerID": 0, "hostID": 300000, "size": 65536}]
    assert out["linux"]["gidMappings"] == out["linux"]["uidMappings"]
    assert make()["linux"]["namespaces"] == [{"type": "mount"}]


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"namespaces": {"user": None}}, "needs uid and gid mappings"),
        ({"uid_mappings": spec.pod_mapping(1), "gid_mappings": spec.pod_mapping(1)}, "need a user"),
        ({"namespaces": {"time": None}}, "unknown namespace"),
        ({"namespaces": {"network": "net"}}, "absolute"),
        ({"hostname": "pod"}, "UTS namespace"),
    ],
)
def test_namespaces_that_cannot_be_set_up_are_refused(fields: dict[str, Any], message: str) -> None:
    with pytest.raises(spec.SpecError, match=message):
        make(**fields)


def test_hostname_in_the_pods_uts_namespace() -> None:
    assert make(hostname="web-0", namespaces={"uts": None})["hostname"] == "web-0"


def test_cpu_and_memory_from_requests_and_limits() -> None:
    res = spec.resources(spec.Resources(cpu_request_milli=500, cpu_limit_milli=250))
    assert res["cpu"] == {"shares": 512, "quota": 25000, "period": 100000}
    assert spec.resources(spec.Resources(cpu_limit_milli=2000))["cpu"]["shares"] == 2048
    assert spec.resources(spec.Resources())["cpu"] == {"shares": 2}
    assert spec.resources(spec.Resources(cpu_limit_milli=1))["cpu"]["quota"] == 1000
    res = spec.resources(spec.Resources(memory_limit=64 << 20, pids_limit=100))
    assert res["memory"] == {"limit": 64 << 20}
    assert res["pids"] == {"limit": 100}
    assert res["devices"] == [{"allow": False, "access": "rwm"}]
    with pytest.raises(spec.SpecError):
        spec.resources(spec.Resources(memory_limit=0))


def test_cgroups_path_sysctls_rlimits_and_annotations() -> None:
    out = make(
        cgroups_path="/vkpy/pod-uid/app",
        sysctls={"net.ipv4.ip_unprivileged_port_start": "0"},
        rlimits=[spec.Rlimit("RLIMIT_NOFILE", 1024, 4096)],
        annotations={"io.kubernetes.pod.name": "web"},
    )
    assert out["linux"]["cgroupsPath"] == "/vkpy/pod-uid/app"
    assert out["linux"]["sysctl"] == {"net.ipv4.ip_unprivileged_port_start": "0"}
    assert out["process"]["rlimits"] == [{"type": "RLIMIT_NOFILE", "soft": 1024, "hard": 4096}]
    assert out["annotations"] == {"io.kubernetes.pod.name": "web"}
    with pytest.raises(spec.SpecError, match="absolute"):
        make(cgroups_path="vkpy/pod")
    with pytest.raises(spec.SpecError, match="rlimit"):
        make(rlimits=[spec.Rlimit("RLIMIT_FLY", 1, 1)])
    with pytest.raises(spec.SpecError, match="soft"):
        make(rlimits=[spec.Rlimit("RLIMIT_NOFILE", 10, 1)])


def test_seccomp_runtime_default_follows_the_containers_capabilities() -> None:
    runtime_default = spec.Seccomp("RuntimeDefault", PROFILE)
    out = make(security=spec.Security(seccomp=runtime_default))["linux"]["seccomp"]
    assert out["defaultAction"] == "SCMP_ACT_ERRNO"
    assert [rule["names"] for rule in out["syscalls"]] == [["read", "write"], ["chroot"]]
    dropped = spec.Security(capabilities_drop=["SYS_CHROOT"], seccomp=runtime_default)
    out = make(security=dropped)["linux"]["seccomp"]
    assert [rule["names"] for rule in out["syscalls"]] == [["read", "write"]]


def test_seccomp_unconfined_has_none_and_a_profile_must_be_given() -> None:
    assert "seccomp" not in make()["linux"]
    with pytest.raises(spec.SpecError, match="profile"):
        make(security=spec.Security(seccomp=spec.Seccomp("Localhost")))
