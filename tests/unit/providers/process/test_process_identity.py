"""Per-pod ids of the process backend (identity.py) and the kubelet's non-root check
(pod_config.py): which ids a pod gets, keeps, and is refused."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

from vkpy.node.podspec.env import ConfigError
from vkpy.node.podspec.pod_config import check_run_as_non_root
from vkpy.providers.base import ContainerConfig, PodConfig, PodRef
from vkpy.providers.errors import CannotStartError, UnsupportedError
from vkpy.providers.process.config import ProcessConfig, RunAs
from vkpy.providers.process.idclaims import HostClaims
from vkpy.providers.process.identity import IdPool, PodIdentity, container_ids
from vkpy.providers.process.provider import ProcessProvider

FIRST, LAST = 910000, 910009


def pod(uid: str, container_security: Any = None, **pod_security: Any) -> PodConfig:
    spec: dict[str, Any] = {"containers": [{"name": "app"}]}
    if pod_security:
        spec["securityContext"] = pod_security
    app = ContainerConfig(
        "app", "busybox", ("true",), (), spec={"securityContext": container_security or {}}
    )
    return PodConfig(
        ref=PodRef("ns", uid, uid),
        pod={"metadata": {"name": uid, "namespace": "ns", "uid": uid}, "spec": spec},
        init_containers=(),
        containers=(app,),
        volumes=(),
    )


def pool() -> IdPool:
    return IdPool(FIRST, LAST, True, RunAs(None, None))


def test_each_pod_gets_an_id_no_other_pod_has_until_released() -> None:
    ids = pool()
    first = ids.allocate(pod("a"), "n1")
    second = ids.allocate(pod("b"), "n1")
    assert first.own is not None and second.own is not None
    assert first.own != second.own
    assert FIRST <= first.own <= LAST and FIRST <= second.own <= LAST
    assert ids.allocate(pod("a"), "n1") == first  # asked again: the same
    ids.release("a")
    third = ids.allocate(pod("c"), "n1")
    assert third.own != second.own


def test_ids_found_on_disk_are_kept(tmp_path: Path) -> None:
    ids = pool()
    kept = ids.allocate(pod("a"), "n1")
    kept.save(tmp_path)
    restarted = pool()
    loaded = PodIdentity.load(tmp_path)
    assert loaded == kept
    restarted.hold("a", loaded)
    assert restarted.allocate(pod("b"), "n1").own != kept.own


@pytest.mark.parametrize(
    ("security", "words"),
    [
        ({"runAsUser": 0}, "runAsUser 0"),
        ({"runAsUser": 1000}, "runAsUser 1000"),
        ({"runAsUser": 10001}, "runAsUser 10001"),
        ({"runAsGroup": 0}, "runAsGroup 0"),
    ],
)
def test_ids_the_range_cannot_give_make_the_pod_wait(security: dict[str, Any], words: str) -> None:
    """Refused for its ids, the pod waits with CreateContainerConfigError (issue 31:
    Failed, its ReplicaSet replaced it again and again)."""
    with pytest.raises(CannotStartError) as refused:
        pool().allocate(pod("a", security), "n1")
    assert refused.value.reason == "CreateContainerConfigError"
    assert f"{words} is outside this node's pod id range {FIRST}-{LAST}" in str(refused.value)
    assert "pod_uid_range" in str(refused.value)


@pytest.mark.parametrize(
    ("security", "words"),
    [
        ({"privileged": True}, "privileged"),
        ({"capabilities": {"add": ["SYS_ADMIN"]}}, "SYS_ADMIN"),
    ],
)
def test_privileges_the_node_does_not_allow_are_refused(
    security: dict[str, Any], words: str
) -> None:
    with pytest.raises(UnsupportedError) as refused:
        pool().allocate(pod("a", security), "n1")
    assert refused.value.reason == "UnsupportedSecurityContext"
    assert words in str(refused.value)


def test_fs_group_outside_the_range_and_another_pods_own_id_are_refused() -> None:
    ids = pool()
    with pytest.raises(CannotStartError, match="fsGroup 2000") as outside:
        ids.allocate(pod("a", fsGroup=2000), "n1")
    assert outside.value.reason == "CreateContainerConfigError"
    other = ids.allocate(pod("b"), "n1")
    with pytest.raises(CannotStartError, match="another pod") as taken:
        ids.allocate(pod("c", runAsUser=other.own), "n1")
    assert taken.value.reason == "CreateContainerConfigError"


def test_asked_ids_inside_the_range_are_honoured_and_not_given_to_others() -> None:
    ids = pool()
    chosen = pod("a", {"runAsGroup": FIRST + 1}, runAsUser=FIRST, fsGroup=FIRST + 2)
    identity = ids.allocate(chosen, "n1")
    app = container_ids(identity, chosen, chosen.containers[0])
    assert (app.uid, app.gid) == (FIRST, FIRST + 1)
    assert FIRST + 2 in app.groups and identity.own in app.groups
    other = ids.allocate(pod("b"), "n1")
    assert other.own not in (FIRST, FIRST + 1, FIRST + 2, identity.own)


def test_without_per_pod_ids_only_the_shared_identity_may_be_asked_for() -> None:
    shared = IdPool(FIRST, LAST, False, RunAs(65534, 65534))
    assert shared.allocate(pod("a", runAsUser=65534), "n1").own is None
    with pytest.raises(CannotStartError, match="runAsUser 0") as refused:
        shared.allocate(pod("b", runAsUser=0), "n1")
    assert refused.value.reason == "CreateContainerConfigError"


def test_run_as_non_root_with_user_zero_is_a_config_error() -> None:
    raw = pod("a", {"runAsNonRoot": True}, runAsUser=0).pod
    container = {"name": "app", "securityContext": {"runAsNonRoot": True}}
    with pytest.raises(ConfigError, match="container's runAsUser breaks non-root policy"):
        check_run_as_non_root(raw, container)
    check_run_as_non_root(raw, {"name": "app", "securityContext": {"runAsUser": 5}})
    check_run_as_non_root(raw, {"name": "app"})  # runAsUser 0 without runAsNonRoot: not here


def test_run_as_non_root_refuses_an_image_that_runs_as_root() -> None:
    """As the kubelet: without a runAsUser, the image's user decides."""
    raw = pod("a", {"runAsNonRoot": True}).pod
    container = {"name": "app", "image": "busybox", "securityContext": {"runAsNonRoot": True}}
    users = {"busybox": 0, "nonroot": 1234}
    with pytest.raises(ConfigError, match="image will run as root"):
        check_run_as_non_root(raw, container, users.get)
    check_run_as_non_root(raw, {**container, "image": "nonroot"}, users.get)
    check_run_as_non_root(raw, {**container, "image": "unknown"}, users.get)  # not known
    with_user = {**container, "securityContext": {"runAsNonRoot": True, "runAsUser": 7}}
    check_run_as_non_root(raw, with_user, users.get)


def test_kubectl_debugs_sys_ptrace_is_tolerated_with_a_warning_other_capabilities_are_not() -> None:
    ids = pool()
    running = pod("a")
    ids.allocate(running, "n1")

    def debug(caps: list[str]) -> ContainerConfig:
        return ContainerConfig(
            "dbg", "busybox", ("sh",), (), spec={"securityContext": {"capabilities": {"add": caps}}}
        )

    warnings = ids.check_added(running, [debug(["SYS_PTRACE"])])
    assert len(warnings) == 1 and "SYS_PTRACE not granted" in warnings[0]
    with pytest.raises(UnsupportedError, match="NET_ADMIN"):
        ids.check_added(running, [debug(["SYS_PTRACE", "NET_ADMIN"])])


def test_the_node_says_how_its_pods_are_kept_apart(tmp_path: Path) -> None:
    def label(raw: dict[str, Any]) -> str:
        settings = {"runtime": "host", **raw}  # per-pod users are host mode's
        config = ProcessConfig.from_dict(settings, state_dir=str(tmp_path), internal_ip="127.0.0.1")
        return ProcessProvider(config).node_info().labels["vkpy.io/process-isolation"]

    expected = "per-pod-users" if os.geteuid() == 0 else "shared-user"
    assert label({}) == expected
    if os.geteuid() == 0:
        assert label({"run_as": "nobody"}) == "shared-user"


def test_two_nodes_on_one_host_never_give_one_id_to_two_pods(tmp_path: Path) -> None:
    """Host-wide claims (idclaims.py): each node's pool sees the other's pods."""
    claims = HostClaims(tmp_path / "claims")
    one, two = (IdPool(FIRST, LAST, True, RunAs(None, None), claims) for _ in range(2))
    a = one.allocate(pod("a"), "n1", tmp_path / "n1" / "a")
    b = two.allocate(pod("b"), "n2", tmp_path / "n2" / "b")
    assert a.own != b.own
    one.release("a")
    c = two.allocate(pod("c"), "n2", tmp_path / "n2" / "c")
    assert c.own == a.own  # free again once its pod is gone


def test_a_stale_claim_is_taken_over(tmp_path: Path) -> None:
    claims = HostClaims(tmp_path / "claims", grace=0)
    gone = IdPool(FIRST, LAST, True, RunAs(None, None), claims)
    old = gone.allocate(pod("a"), "n1", tmp_path / "removed")  # never written: stale
    fresh = IdPool(FIRST, LAST, True, RunAs(None, None), claims)
    kept_dir = tmp_path / "kept"
    kept_dir.mkdir()
    kept = fresh.allocate(pod("b"), "n2", kept_dir)
    assert kept.own == old.own
    kept.save(kept_dir)
    other = IdPool(FIRST, LAST, True, RunAs(None, None), claims)
    assert other.allocate(pod("c"), "n3", tmp_path / "c").own != kept.own


def test_ids_pods_ask_for_stay_free_while_other_pods_run() -> None:
    """Pods usually ask for the low ids of a range (the e2e suite's 1000, 1001): a pod
    that asks for none must not take them as its own, or the next pod asking is refused."""
    ids = pool()
    for name in ("a", "b", "c"):
        ids.allocate(pod(name), "n1")
    asking = pod("d", {"runAsGroup": FIRST + 1}, runAsUser=FIRST, fsGroup=FIRST + 2)
    identity = ids.allocate(asking, "n1")
    assert identity.uid == FIRST
    assert identity.own is not None and identity.own > FIRST + 2


def test_removing_a_pod_never_kills_an_id_another_nodes_pod_owns(tmp_path: Path) -> None:
    """A pod may ask for an id (runAsUser) that another node on the host gave a pod as
    its own: removing the asking pod kills its ids' processes, so it must leave that
    id alone (it killed the other node's pod, seen as exit 137 in conformance runs)."""
    claims = HostClaims(tmp_path / "claims")
    one, two = (IdPool(FIRST, LAST, True, RunAs(None, None), claims) for _ in range(2))
    owner = one.allocate(pod("a"), "n1", tmp_path / "n1" / "a")
    assert owner.own is not None
    asking = two.allocate(pod("b", runAsUser=owner.own), "n2", tmp_path / "n2" / "b")
    assert owner.own in asking.ids()
    assert owner.own not in two.exclusive_ids("b")
    assert asking.own in two.exclusive_ids("b")
    one.release("a")
    assert owner.own in two.exclusive_ids("b")  # nobody else's now


def test_own_ids_leave_the_low_ids_pods_ask_for() -> None:
    """Pods ask for the low ids of a range (the conformance suite's 1000 and 1001):
    own ids come from its top, so a pod asking for one is not refused because another
    pod got it as its own (issue 18: 'pod runAsUser 1000 is the own id of another pod')."""
    ids = pool()
    first = ids.allocate(pod("a"), "n1")
    assert first.own == LAST
    asking = ids.allocate(pod("b", runAsUser=FIRST, fsGroup=FIRST + 1), "n1")
    assert asking.uid == FIRST and FIRST + 1 in asking.ids()
    assert asking.own == LAST - 1
