"""A pod's life on the node, branch by branch: create, run, crash, deadline, loss,
deletion, orphans, and the failures of each step."""

from __future__ import annotations

import asyncio
from dataclasses import replace

from tests.unit.fake_clock import settle
from tests.unit.node.pods.test_pod_retries import ENV_FROM_MISSING
from tests.unit.pod_harness import Harness
from tests.unit.pod_harness import pod as pod_object
from vkpy.kube.client import ApiError
from vkpy.providers.base import ContainerState, PodState
from vkpy.providers.errors import RetryableError, UnsupportedError


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


def waiting(reason: str, restarts: int, name: str = "c0") -> ContainerState:
    return ContainerState(name=name, state="waiting", reason=reason, restart_count=restarts)


async def test_create_reports_running_and_ready_with_one_write() -> None:
    async with Harness() as h:
        await h.start()
        pod = await h.add("web")
        status = h.current(pod)["status"]
        assert status["phase"] == "Running"
        assert status["podIP"] == "10.0.0.7"
        assert status["containerStatuses"][0]["ready"] is True
        assert h.condition(pod, "Ready") == "True"
        assert len(h.status_patches(pod)) == 1
        assert [e["reason"] for e in h.kube.events()] == ["Started"]


async def test_crash_loop_is_reported_with_one_backoff_event() -> None:
    async with Harness() as h:
        await h.start()
        pod = await h.add("web")
        uid = pod["metadata"]["uid"]
        for restarts in (1, 2, 3):
            h.backend.set_state(
                uid, PodState(phase="Running", containers=(waiting("CrashLoopBackOff", restarts),))
            )
            await h.clock.advance(1)
        (container,) = h.current(pod)["status"]["containerStatuses"]
        assert container["state"]["waiting"]["reason"] == "CrashLoopBackOff"
        assert container["restartCount"] == 3
        assert h.condition(pod, "Ready") == "False"
        (backoff,) = h.kube.events("BackOff")
        assert backoff["count"] == 1


async def test_completed_pod_is_written_once_and_then_left_alone() -> None:
    async with Harness() as h:
        controller = await h.start()
        pod = await h.add("job", restartPolicy="Never")
        uid = pod["metadata"]["uid"]
        done = ContainerState(name="c0", state="terminated", exit_code=0, reason="Completed")
        h.backend.set_state(uid, PodState(phase="Succeeded", containers=(done,)))
        await settle()
        assert h.current(pod)["status"]["phase"] == "Succeeded"
        reads = h.backend.count("status", uid)
        controller.notify(h.ref(pod))
        await h.clock.advance(600)
        assert h.backend.count("status", uid) == reads
        assert h.backend.count("create", uid) == 1


async def test_terminal_pod_on_the_api_is_never_started() -> None:
    async with Harness() as h:
        done = pod_object("old", restartPolicy="Never")
        done["status"] = {"phase": "Succeeded"}
        h.kube.add_pod(done)
        await h.start()
        await h.clock.advance(10)
        assert h.backend.calls == [("list", "")]


async def test_deadline_kills_a_quiet_pod_on_time() -> None:
    """The deadline timer is armed from the status write's answer (startTime), not
    from a later watch echo (which no longer runs a sync)."""
    async with Harness() as h:
        await h.start()
        pod = await h.add("batch", activeDeadlineSeconds=30)
        uid = pod["metadata"]["uid"]
        await h.clock.advance(29)
        assert h.backend.count("delete", uid) == 0
        await h.clock.advance(2)
        assert h.backend.count("delete", uid) == 1
        status = h.current(pod)["status"]
        assert (status["phase"], status["reason"]) == ("Failed", "DeadlineExceeded")
        assert status["containerStatuses"][0]["state"]["terminated"]["exitCode"] == 137
        assert h.kube.events("DeadlineExceeded")


async def test_deadline_kill_interrupted_by_the_backend_is_finished() -> None:
    async with Harness() as h:
        await h.start()
        pod = await h.add("batch", activeDeadlineSeconds=30)
        uid = pod["metadata"]["uid"]
        h.backend.fail("delete", RetryableError("throttled"))
        await h.clock.advance(31)
        assert h.backend.count("delete", uid) == 2  # the kill, then its retry
        assert h.backend.count("create", uid) == 1
        assert h.current(pod)["status"]["reason"] == "DeadlineExceeded"


async def test_backend_warnings_become_one_event_each() -> None:
    async with Harness() as h:
        await h.start()
        pod = await h.add("web")
        uid = pod["metadata"]["uid"]
        state = h.backend.states[uid]
        for _ in range(3):
            h.backend.set_state(uid, replace(state, warnings=("memory clamped to 128Mi",)))
            await settle()
        (event,) = h.kube.events("BackendAdjusted")
        assert event["count"] == 1


async def test_backend_trouble_on_create_is_retried() -> None:
    async with Harness() as h:
        h.backend.fail("create", RetryableError("throttled"), times=3)
        await h.start()
        pod = await h.add("web")
        await h.clock.advance(5)
        assert h.backend.count("create") == 4
        assert h.current(pod)["status"]["phase"] == "Running"


async def test_changed_image_is_applied_and_an_unsupported_change_reported() -> None:
    async with Harness() as h:
        await h.start()
        pod = await h.add("web")
        uid = pod["metadata"]["uid"]
        h.kube.update_pod(pod, spec={"containers": [{"name": "c0", "image": "img0:2"}]})
        await settle()
        assert h.backend.count("update", uid) == 1
        assert h.backend.configs[uid].containers[0].image == "img0:2"
        assert h.kube.events("Updated")
        h.backend.fail("update", UnsupportedError("images are fixed here"))
        h.kube.update_pod(pod, spec={"containers": [{"name": "c0", "image": "img0:3"}]})
        await settle()
        assert h.backend.count("update", uid) == 2
        assert h.kube.events("FailedUpdate")


async def test_graceful_delete_of_a_pod_never_created_or_already_final() -> None:
    async with Harness() as h:
        await h.start()
        waiting_pod = await h.add("cfg", containers=ENV_FROM_MISSING)
        h.kube.mark_deleting(waiting_pod)
        await settle()
        assert h.kube.pod("ns", "cfg") is None
        assert h.backend.count("delete") == 0
        killed = await h.add("batch", activeDeadlineSeconds=5)
        await h.clock.advance(6)
        h.kube.mark_deleting(killed)
        await settle()
        assert h.kube.pod("ns", "batch") is None
        assert h.backend.count("delete") == 1  # the kill, not a second stop
        assert not h.kube.events("Killing")


async def test_delete_of_the_api_object_is_retried_on_server_errors() -> None:
    async with Harness() as h:
        await h.start()
        pod = await h.add("web")
        h.kube.fail("DELETE", r"/pods/web$", ApiError(0, "Unreachable", "connection reset"))
        h.kube.fail("DELETE", r"/pods/web$", ApiError(503, "ServiceUnavailable", "busy"))
        h.kube.mark_deleting(pod)
        await h.clock.advance(5)
        assert h.kube.pod("ns", "web") is None
        assert len(h.kube.requests_to("DELETE", r"/pods/web$")) == 3
        assert h.backend.count("delete") == 1  # stopped once, not again per retry


async def test_pod_force_deleted_on_the_api_is_stopped_at_once() -> None:
    async with Harness() as h:
        controller = await h.start()
        pod = await h.add("web")
        uid = pod["metadata"]["uid"]
        h.kube.remove(h.kube.pod_path(pod))
        await settle()
        assert h.backend.count("delete", uid) == 1
        assert controller.pods() == []
        assert h.kube.requests_to("DELETE") == []


async def test_delete_during_create_stops_the_pod_once_created() -> None:
    async with Harness() as h:
        await h.start()
        h.backend.create_gate = asyncio.Event()
        pod = h.kube.add_pod(pod_object("slow"))
        await settle()
        h.kube.mark_deleting(pod)
        await settle()
        assert h.backend.count("delete") == 0  # one operation per pod at a time
        h.backend.create_gate.set()
        await settle()
        assert h.backend.count("create") == 1
        assert h.backend.count("delete") == 1
        assert h.kube.pod("ns", "slow") is None
        assert h.backend.states == {}


async def test_orphans_in_the_backend_are_removed_and_known_pods_adopted() -> None:
    async with Harness() as h:
        known = h.kube.add_pod(pod_object("known"))
        orphan = h.kube.add_pod(pod_object("orphan"))
        for obj in (known, orphan):
            ref = h.ref(obj)
            h.backend.refs[ref.uid] = ref
            h.backend.states[ref.uid] = PodState(phase="Running")
        h.kube.remove(h.kube.pod_path(orphan))
        controller = await h.start()
        await settle()
        assert h.backend.count("create") == 0
        assert h.backend.count("delete", orphan["metadata"]["uid"]) == 1
        assert list(h.backend.states) == [known["metadata"]["uid"]]
        assert [p["metadata"]["name"] for p in controller.pods()] == ["known"]
        assert h.current(known)["status"]["phase"] == "Running"


async def test_status_write_failing_then_succeeding() -> None:
    async with Harness() as h:
        for status in (500, 0, 429, 403):
            error = ApiError(status, "Trouble", f"status {status}")
            h.kube.fail("PATCH", r"/pods/web/status$", error)
        await h.start()
        pod = await h.add("web")
        assert h.current(pod)["status"]["phase"] == "Pending"
        await h.clock.advance(10)
        assert h.current(pod)["status"]["phase"] == "Running"
        assert len(h.status_patches(pod)) == 5


async def test_status_write_conflict_is_not_retried() -> None:
    """409: the pod was replaced by another of the same name (UID precondition)."""
    async with Harness() as h:
        h.kube.fail("PATCH", r"/pods/web/status$", ApiError(409, "Conflict", "uid"), 5)
        await h.start()
        pod = await h.add("web")
        written = len(h.status_patches(pod))
        await h.clock.advance(60)
        assert len(h.status_patches(pod)) == written <= 2  # no back-off retries


async def test_api_errors_while_reading_a_config_map_are_retried() -> None:
    async with Harness() as h:
        h.kube.objects["/api/v1/namespaces/ns/configmaps/settings"] = {
            "metadata": {"name": "settings"},
            "data": {"level": "info"},
        }
        h.kube.fail("GET", r"/configmaps/settings$", ApiError(500, "InternalError", "etcd"))
        h.kube.fail("GET", r"/configmaps/settings$", ApiError(0, "Unreachable", "reset"))
        await h.start()
        pod = await h.add("cfg", containers=ENV_FROM_MISSING)
        await h.clock.advance(5)
        assert h.current(pod)["status"]["phase"] == "Running"
        assert h.backend.configs[pod["metadata"]["uid"]].containers[0].env == (("LEVEL", "info"),)


async def test_watch_errors_of_every_kind_are_survived() -> None:
    async with Harness() as h:
        await h.start()
        for error in (
            ApiError(410, "Gone", "too old"),
            ApiError(500, "InternalError", "etcd"),
            ApiError(0, "Unreachable", "reset"),
            None,
        ):
            h.kube.cut_watches(error)
            await h.clock.advance(60)
        pod = await h.add("late")
        assert h.current(pod)["status"]["phase"] == "Running"


async def test_polled_backend_changes_reach_the_api() -> None:
    async with Harness(polled=True, poll_interval=5.0) as h:
        await h.start()
        pod = await h.add("web", restartPolicy="Never")
        uid = pod["metadata"]["uid"]
        assert h.current(pod)["status"]["phase"] == "Running"
        done = ContainerState(name="c0", state="terminated", exit_code=1, reason="Error")
        h.backend.set_state(uid, PodState(phase="Failed", containers=(done,)))  # no push
        await settle()
        assert h.current(pod)["status"]["phase"] == "Running"
        await h.clock.advance(5)
        assert h.current(pod)["status"]["phase"] == "Failed"
        other = await h.add("other", restartPolicy="Never")
        h.backend.lose(other["metadata"]["uid"])
        await h.clock.advance(5)
        assert h.current(other)["status"]["phase"] == "Failed"


async def test_backend_trouble_reading_status_is_retried() -> None:
    async with Harness() as h:
        h.backend.fail("status", RetryableError("throttled"), times=2)
        await h.start()
        pod = await h.add("web")
        await h.clock.advance(2)
        assert h.current(pod)["status"]["phase"] == "Running"
        assert h.backend.count("create") == 1


async def test_pod_deleted_while_the_watch_was_down_is_stopped_after_the_relist() -> None:
    async with Harness() as h:
        controller = await h.start()
        pod = await h.add("web")
        h.kube.cut_watches(ApiError(410, "Gone", "too old"))
        path = h.kube.pod_path(pod)
        h.kube.objects.pop(path)  # gone without an event the watch could see
        await h.clock.advance(60)
        assert h.backend.count("delete", pod["metadata"]["uid"]) == 1
        assert controller.pods() == []


async def test_adoption_waits_for_the_backend_to_answer() -> None:
    async with Harness() as h:
        h.backend.fail("list", RetryableError("starting"), times=3)
        controller = await h.start()
        assert not controller.ready.is_set()
        await h.clock.advance(4)
        assert controller.ready.is_set()
        pod = await h.add("web")
        assert h.current(pod)["status"]["phase"] == "Running"


async def test_the_kubelet_api_reads_pods_by_name_and_uid() -> None:
    async with Harness() as h:
        controller = await h.start()
        pod = await h.add("web")
        uid = pod["metadata"]["uid"]
        assert controller.find("ns", "web")["metadata"]["uid"] == uid
        assert controller.find("ns", "web", uid) is not None
        assert controller.find("ns", "web", "other-uid") is None
        assert controller.find("other", "web") is None
        assert [p["metadata"]["uid"] for p in controller.pods()] == [uid]
        assert controller.idle()


async def test_a_new_pod_is_not_held_behind_a_backlog_of_deletes() -> None:
    """Issue 30: with one first-come queue, a new pod waited behind every delete that
    came due before it (here it was started after all 20). Starts and the rest now
    take turns."""
    async with Harness(workers=1) as h:
        await h.start()
        old = [await h.add(f"old{n}") for n in range(20)]
        h.backend.calls.clear()
        for pod in old:
            h.kube.mark_deleting(pod, grace=0)
        fresh = h.kube.add_pod(pod_object("fresh"))
        await settle()
        order = [(op, uid) for op, uid in h.backend.calls if op in ("create", "delete")]
        assert len(order) == 21
        fresh_at = order.index(("create", fresh["metadata"]["uid"]))
        assert fresh_at <= 1, f"the new pod was started after {fresh_at} deletes"
        assert h.current(fresh)["status"]["phase"] == "Running"
        assert [p for p in old if h.kube.pod("ns", p["metadata"]["name"]) is not None] == []
