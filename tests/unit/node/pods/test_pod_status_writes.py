"""When the pod controller writes a pod's status, and what it says with it.

Status is compared with what the API server holds (as the watch delivered it), not
with what vkpy last wrote: a change someone else made is corrected. The echo of our
own write and updates that change nothing the kubelet reacts to cost no backend call.
Events describing a change are sent once the change is written.
"""

from __future__ import annotations

from tests.unit.fake_clock import settle
from tests.unit.pod_harness import Harness, pod
from vkpy.kube.client import ApiError
from vkpy.providers.base import ContainerState, PodState


async def test_ready_is_written_again_after_someone_else_set_it_false() -> None:
    """Defect 1: the node lifecycle controller marks pods Ready=False during an
    outage; afterwards vkpy must write Ready=True again."""
    async with Harness() as h:
        await h.start()
        pod = await h.add("web")
        assert h.condition(pod, "Ready") == "True"
        h.kube.set_status(
            pod,
            {
                "conditions": [
                    {"type": "Ready", "status": "False", "reason": "NodeNotReady"},
                ]
            },
        )
        await settle()
        assert h.condition(pod, "Ready") == "True"


async def test_ready_is_restored_after_a_relist() -> None:
    """Defect 1 through a relist: the watch breaks while the status changes."""
    async with Harness() as h:
        await h.start()
        pod = await h.add("web")
        h.kube.cut_watches(ApiError(410, "Gone", "too old resource version"))
        h.kube.set_status(pod, {"conditions": [{"type": "Ready", "status": "False"}]})
        await h.clock.advance(60)
        assert h.condition(pod, "Ready") == "True"


async def test_echo_of_our_own_status_write_does_not_read_the_backend() -> None:
    """Defect 6: the watch echo of vkpy's own write, and updates that change nothing
    the kubelet reacts to, run no sync and no backend status call."""
    async with Harness() as h:
        await h.start()
        pod = await h.add("web")
        uid = pod["metadata"]["uid"]
        state = await h.backend.get_pod_status(h.ref(pod))
        before = h.backend.count("status", uid)
        not_ready = PodState(
            phase="Running",
            started_at=state.started_at,
            pod_ip=state.pod_ip,
            containers=tuple(
                ContainerState(name=c.name, state="running", started_at=c.started_at, image=c.image)
                for c in state.containers
            ),
        )
        h.backend.set_state(uid, not_ready)  # pushed: one sync, one status read, one write
        await settle()
        assert h.condition(pod, "Ready") == "False"
        assert h.backend.count("status", uid) == before + 1
        h.kube.set_status(pod, {})  # a resourceVersion bump only
        h.kube.update_pod(pod, metadata={"managedFields": [{"manager": "x"}]})
        await settle()
        assert h.backend.count("status", uid) == before + 1


async def test_started_event_is_sent_once_when_the_status_patch_is_retried() -> None:
    """Defect 7: Events follow a successful write, so a retried patch sends none twice."""
    async with Harness() as h:
        h.kube.fail("PATCH", r"/pods/web/status$", ApiError(500, "InternalError", "etcd"))
        await h.start()
        pod = await h.add("web")
        await h.clock.advance(5)
        assert h.current(pod)["status"]["phase"] == "Running"
        (started,) = h.kube.events("Started")
        assert started["count"] == 1


async def test_condition_reason_that_no_longer_applies_is_cleared_in_one_write() -> None:
    """Conditions merge by type on the API server: a reason that should go is sent as
    null. Otherwise Ready=True keeps reason ContainersNotReady and, since status is
    compared with the API's copy, the same patch would be sent forever."""
    async with Harness() as h:
        await h.start()
        pod = await h.add("slow")
        uid = pod["metadata"]["uid"]
        ready_state = h.backend.states[uid]
        h.backend.set_state(uid, PodState(phase="Pending"))
        await settle()
        assert h.condition(pod, "Ready") == "False"
        writes = len(h.status_patches(pod))
        h.backend.set_state(uid, ready_state)
        await h.clock.advance(60)
        assert len(h.status_patches(pod)) == writes + 1
        conditions = {c["type"]: c for c in h.current(pod)["status"]["conditions"]}
        assert conditions["Ready"]["status"] == "True"
        assert "reason" not in conditions["Ready"]
        assert "reason" not in conditions["ContainersReady"]


async def test_a_delete_that_lands_just_before_our_status_write_is_acted_on() -> None:
    """Soak defect: the pod was deleted while its first status write was in flight.
    The write's answer already carries the deletionTimestamp and is newer than the
    watch's event of the delete; the watch then echoes the answer itself. Both events
    were passed over as older or the same, so the pod stayed Terminating for good."""
    async with Harness() as h:
        await h.start()
        created = h.kube.add_pod(pod("web"))
        h.kube.before("PATCH", r"/pods/web/status$", lambda: h.kube.mark_deleting(created))
        await settle()
        await h.clock.advance(1)
        assert h.kube.pod("ns", "web") is None
        assert h.backend.count("delete", created["metadata"]["uid"]) == 1
