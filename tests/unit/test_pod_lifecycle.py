"""A pod's life on the node, branch by branch: create, run, crash, deadline, loss,
deletion, orphans, and the failures of each step."""

from __future__ import annotations

from tests.unit.fake_clock import settle
from tests.unit.pod_harness import Harness
from vkpy.kube.client import ApiError


async def test_pod_lost_by_the_backend_with_restart_policy_never_fails() -> None:
    """Defect 4: a Job's pod whose backend state vanished must not run twice."""
    async with Harness() as h:
        controller = await h.start()
        pod = await h.add("job", restartPolicy="Never")
        uid = pod["metadata"]["uid"]
        h.backend.lose(uid)
        controller.notify(h.ref(pod))
        await settle()
        assert h.backend.count("create", uid) == 1
        status = h.current(pod)["status"]
        assert status["phase"] == "Failed"
        (container,) = status["containerStatuses"]
        terminated = container["state"]["terminated"]
        assert terminated["reason"] == "ContainerStatusUnknown"
        assert terminated["exitCode"] == 137
        assert "could not be located" in terminated["message"]
        await h.clock.advance(300)
        assert h.backend.count("create", uid) == 1


async def test_pod_lost_by_the_backend_with_restart_policy_always_is_started_again() -> None:
    async with Harness() as h:
        controller = await h.start()
        pod = await h.add("web")
        uid = pod["metadata"]["uid"]
        h.backend.lose(uid)
        controller.notify(h.ref(pod))
        await h.clock.advance(1)
        assert h.backend.count("create", uid) == 2
        assert h.current(pod)["status"]["phase"] == "Running"


async def test_deadline_killed_pod_is_not_started_again_when_the_write_fails() -> None:
    """Defect 5: the kill for activeDeadlineSeconds is final even if the status
    write after it fails."""
    async with Harness() as h:
        await h.start()
        pod = await h.add("batch", activeDeadlineSeconds=30)
        uid = pod["metadata"]["uid"]
        assert h.current(pod)["status"]["phase"] == "Running"
        h.kube.fail("PATCH", r"/pods/batch/status$", ApiError(503, "Unavailable", "busy"), 2)
        await h.clock.advance(31)
        await h.clock.advance(30)
        assert h.backend.count("create", uid) == 1
        assert h.backend.count("delete", uid) == 1
        status = h.current(pod)["status"]
        assert (status["phase"], status["reason"]) == ("Failed", "DeadlineExceeded")


async def test_deleting_a_pod_sends_one_delete_with_its_uid() -> None:
    """Defect 12: one final DELETE per pod, with a UID precondition, and no 404."""
    async with Harness() as h:
        await h.start()
        pod = await h.add("web")
        uid = pod["metadata"]["uid"]
        h.kube.mark_deleting(pod, grace=30)
        await h.clock.advance(1)
        deletes = h.kube.requests_to("DELETE", r"/pods/web$")
        assert [d.body["preconditions"] for d in deletes] == [{"uid": uid}]
        assert h.kube.pod("ns", "web") is None
        assert h.backend.count("delete", uid) == 1
        await h.clock.advance(60)
        assert len(h.kube.requests_to("DELETE", r"/pods/web$")) == 1
