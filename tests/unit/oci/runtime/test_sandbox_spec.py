"""The pod sandbox's own spec: the namespaces the pod's containers will join."""

from __future__ import annotations

from pathlib import Path

from vkpy.oci.runtime import runc, sandbox, spec

X86 = spec.Platform(machine="x86_64", kernel=(6, 1))
UNCONFINED = sandbox.sandbox_security(spec.Seccomp("Unconfined"))


def config(**fields: object) -> sandbox.SandboxConfig:
    values: dict[str, object] = {
        "rootfs": "/images/pause",
        "args": ["/pause"],
        "hostname": "web-0",
        "host_id_base": 3 << 16,
        "security": UNCONFINED,
    }
    values.update(fields)
    return sandbox.SandboxConfig(**values)  # type: ignore[arg-type]


def make(**fields: object) -> dict[str, object]:
    box = sandbox.PodSandbox(runc.Runc(Path("/run/vkpy/runc")), "pod-uid")
    return box.bundle_spec(config(**fields), X86)


def kinds(out: dict[str, object]) -> list[str]:
    linux = out["linux"]
    assert isinstance(linux, dict)
    return [entry["type"] for entry in linux["namespaces"]]


def test_a_sandbox_makes_the_pods_namespaces_and_maps_its_ids() -> None:
    out = make(sysctls={"net.ipv4.ip_unprivileged_port_start": "0"})
    assert kinds(out) == ["pid", "network", "ipc", "uts", "mount", "user"]
    linux = out["linux"]
    assert isinstance(linux, dict)
    assert linux["uidMappings"] == [{"containerID": 0, "hostID": 3 << 16, "size": 65536}]
    assert linux["sysctl"] == {"net.ipv4.ip_unprivileged_port_start": "0"}
    assert out["hostname"] == "web-0"
    assert out["root"] == {"path": "/images/pause", "readonly": True}
    process = out["process"]
    assert isinstance(process, dict)
    assert process["capabilities"]["bounding"] == []


def test_host_users_keep_the_hosts_user_namespace() -> None:
    out = make(host_id_base=None)
    assert "user" not in kinds(out)
    linux = out["linux"]
    assert isinstance(linux, dict)
    assert "uidMappings" not in linux
