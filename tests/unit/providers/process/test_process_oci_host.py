"""What a `runtime: oci` pod may have of the host (privileges.check_host_access) and
which namespaces its containers then keep (ocihost.py), on plain data."""

from __future__ import annotations

from typing import Any

import pytest

from vkpy.providers.base import ContainerConfig, PodConfig, PodRef
from vkpy.providers.errors import UnsupportedError
from vkpy.providers.process import ocihost, privileges
from vkpy.providers.process.idranges import PodRange

SANDBOX = {kind: f"/proc/7/ns/{kind}" for kind in ("user", "network", "ipc", "uts")} | {"pid": None}


def pod(security: dict[str, Any] | None = None, **spec: Any) -> PodConfig:
    app = ContainerConfig("app", "busybox", ("true",), (), spec={"securityContext": security or {}})
    return PodConfig(
        ref=PodRef("ns", "p", "u"),
        pod={"metadata": {"name": "p"}, "spec": {"containers": [{"name": "app"}], **spec}},
        init_containers=(),
        containers=(app,),
        volumes=(),
    )


@pytest.mark.parametrize(
    ("config", "allow", "named"),
    [
        (pod(hostUsers=True), (), "hostUsers"),
        (pod(hostNetwork=True), ("hostUsers",), "hostNetwork"),
        (pod(hostPID=True), ("hostUsers",), "hostPID"),
        (pod(hostPID=True), ("hostPID",), "hostUsers"),
        (pod(hostIPC=True), ("hostIPC",), "hostUsers"),
        (pod({"privileged": True}), ("hostUsers", "hostNetwork"), "privileged"),
    ],
)
def test_host_access_is_refused_unless_allowed(
    config: PodConfig, allow: tuple[str, ...], named: str
) -> None:
    with pytest.raises(UnsupportedError) as refused:
        privileges.check_host_access(config, allow)
    assert refused.value.reason == "UnsupportedSecurityContext"
    assert f"does not list {named})" in str(refused.value)


def test_what_the_runtime_confines_is_not_checked_and_allowed_access_passes() -> None:
    # capabilities and seccomp apply inside the pod's user namespace: runc's part.
    privileges.check_host_access(pod({"capabilities": {"add": ["NET_ADMIN"]}}), ())
    privileges.check_host_access(pod(hostUsers=False), ())
    everything = ("hostUsers", "hostNetwork", "hostPID", "hostIPC", "privileged")
    asks = pod({"privileged": True}, hostUsers=True, hostNetwork=True, hostPID=True, hostIPC=True)
    privileges.check_host_access(asks, everything)


def test_containers_keep_the_host_namespaces_the_pod_asks_for() -> None:
    assert ocihost.container_namespaces({}, SANDBOX) == SANDBOX
    net = ocihost.container_namespaces({"hostNetwork": True}, SANDBOX)
    assert set(net) == {"user", "ipc", "pid"}
    users = ocihost.container_namespaces({"hostUsers": True}, SANDBOX)
    assert set(users) == {"network", "ipc", "uts", "pid"}
    pids = ocihost.container_namespaces({"hostPID": True}, SANDBOX)
    assert set(pids) == {"network", "ipc", "uts"}  # the host's users too
    ipc = ocihost.container_namespaces({"hostIPC": True}, SANDBOX)
    assert set(ipc) == {"network", "uts", "pid"}


def test_host_users_ids_are_the_hosts() -> None:
    ids = PodRange(slot=3, base=1_196_608, size=65536)
    assert ocihost.effective_range({}, ids).host_id(0) == 1_196_608
    assert ocihost.effective_range({"hostUsers": True}, ids).host_id(0) == 0
    assert ocihost.effective_range({"hostPID": True}, ids).host_id(1000) == 1000
    assert ocihost.effective_range({"hostUsers": False}, ids) == ids
