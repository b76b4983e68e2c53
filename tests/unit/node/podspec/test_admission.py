"""Pod admission as the kubelet does it: the node's OS, and which sysctls pods may set."""

from typing import Any

import pytest

from vkpy.node.podspec.admission import Rejection, SysctlPolicy, admit, dotted

SAFE = SysctlPolicy.from_patterns()


def pod(labels: dict[str, str] | None = None, **spec: Any) -> dict[str, Any]:
    return {
        "metadata": {"name": "p", "namespace": "ns", "labels": labels or {}},
        "spec": {"containers": [{"name": "c", "image": "busybox"}], **spec},
    }


def sysctls(*names: str, **spec: Any) -> dict[str, Any]:
    return pod(securityContext={"sysctls": [{"name": n, "value": "1"} for n in names]}, **spec)


def test_a_pod_for_another_os_is_rejected() -> None:
    assert admit(pod(os={"name": "linux"}), "linux", SAFE) is None
    assert admit(pod(os={"name": "windows"}), "linux", SAFE) == Rejection(
        "PodOSNotSupported", "Failed to admit pod as the OS field doesn't match node OS"
    )
    rejected = admit(pod({"kubernetes.io/os": "windows"}), "linux", SAFE)
    assert rejected is not None and rejected.reason == "PodOSSelectorNodeLabelDoesNotMatch"


def test_safe_sysctls_are_admitted_and_unsafe_ones_forbidden() -> None:
    assert (
        admit(sysctls("kernel.shm_rmid_forced", "net.ipv4.tcp_syncookies"), "linux", SAFE) is None
    )
    assert admit(sysctls("kernel/shm_rmid_forced"), "linux", SAFE) is None
    assert admit(sysctls("kernel.msgmax"), "linux", SAFE) == Rejection(
        "SysctlForbidden", 'forbidden sysctl: "kernel.msgmax" not allowlisted'
    )


def test_allowed_unsafe_patterns() -> None:
    policy = SysctlPolicy.from_patterns(["kernel.msg*", "net.core.somaxconn"])
    assert admit(sysctls("kernel.msgmax", "net.core.somaxconn"), "linux", policy) is None
    assert admit(sysctls("kernel.sem"), "linux", policy) is not None
    rejected = admit(sysctls("net.core.somaxconn", hostNetwork=True), "linux", policy)
    assert rejected == Rejection(
        "SysctlForbidden",
        'forbidden sysctl: "net.core.somaxconn" not allowed with host net enabled',
    )
    rejected = admit(sysctls("kernel.shm_rmid_forced", hostIPC=True), "linux", policy)
    assert rejected is not None and "host ipc" in rejected.message


@pytest.mark.parametrize("pattern", ["vm.swappiness", "kernel.*", "Net.core", "net..core", ""])
def test_patterns_that_are_not_namespaced_or_malformed_are_refused(pattern: str) -> None:
    with pytest.raises(ValueError):
        SysctlPolicy.from_patterns([pattern])


def test_slash_separated_names() -> None:
    assert dotted("net/ipv4/conf/eth0.100/rp_filter") == "net.ipv4.conf.eth0/100.rp_filter"
    assert dotted("net.ipv4.conf.eth0/100.rp_filter") == "net.ipv4.conf.eth0/100.rp_filter"
