"""What one pod costs the API server, counted request by request (issue 17).

A benchmark of 1000 pods multiplies each of these: a pod that goes from bound to
Running takes exactly one status patch (Pending straight to Running when the backend
runs it at once), and a deleted pod exactly one final DELETE, never a second that
answers 404. Nothing is read back: the watch brings every change.
"""

from __future__ import annotations

from collections import Counter

from prometheus_client import REGISTRY

from tests.unit.fake_clock import settle
from tests.unit.pod_harness import Harness
from tests.unit.pod_harness import pod as pod_object
from tests.unit.scripted_backend import running
from vkpy.node.pods.pod_controller import PodController
from vkpy.providers.base import PodRef, PodState

PODS = 20


def per_pod(h: Harness, method: str, suffix: str) -> Counter[str]:
    """How many `method` requests each pod's path (ending in `suffix`) received."""
    counts: Counter[str] = Counter()
    for request in h.kube.requests:
        if request.method == method and "/pods/" in request.path and request.path.endswith(suffix):
            counts[request.path.split("/pods/")[1].removesuffix(suffix)] += 1
    return counts


async def test_a_pod_to_running_costs_one_status_patch_and_no_reads() -> None:
    async with Harness() as h:
        await h.start()
        before = len(h.kube.requests)
        for n in range(PODS):
            h.kube.add_pod(pod_object(f"p{n}"))
        await settle()
        names = [f"p{n}" for n in range(PODS)]
        for name in names:
            assert h.kube.pod("ns", name)["status"]["phase"] == "Running"  # type: ignore[index]
        assert per_pod(h, "PATCH", "/status") == Counter({n: 1 for n in names})
        new = h.kube.requests[before:]
        pod_requests = [r for r in new if "/pods" in r.path and not r.path.endswith("/status")]
        assert pod_requests == [], "nothing but the status patch touches the pod"
        await h.clock.advance(120)  # later: no heartbeat-like rewrites of running pods
        assert per_pod(h, "PATCH", "/status") == Counter({n: 1 for n in names})


async def test_a_pod_to_running_costs_one_backend_status_read() -> None:
    """The backend says "changed" while it creates the pod; the state read after the
    create already covers that, so it costs no second sync and no second read (on a
    cloud backend, a second API call per pod)."""
    async with Harness() as h:
        await h.start()
        pods = [h.kube.add_pod(pod_object(f"p{n}")) for n in range(PODS)]
        await settle()
        await h.clock.advance(60)
        for p in pods:
            assert h.current(p)["status"]["phase"] == "Running"
            assert h.backend.count("status", p["metadata"]["uid"]) == 1


async def test_a_polled_pod_costs_one_sync_and_one_look_per_poll() -> None:
    """A backend that cannot push is asked every poll_interval; its first look at a
    new pod finds what the create's sync already read and wakes nothing (it used to:
    a second sync and a third read of the same Running)."""
    async with Harness(polled=True, poll_interval=5.0) as h:
        await h.start()
        pods = [h.kube.add_pod(pod_object(f"p{n}")) for n in range(PODS)]
        await settle()
        await h.clock.advance(5)
        for p in pods:
            assert h.current(p)["status"]["phase"] == "Running"
            assert h.backend.count("status", p["metadata"]["uid"]) == 2  # the sync, one poll
        await h.clock.advance(5)
        for p in pods:
            assert h.backend.count("status", p["metadata"]["uid"]) == 3  # one more poll only


async def test_a_change_pushed_after_the_state_was_read_is_written_too() -> None:
    """The one read per sync must not swallow a change the backend reports while (or
    after) it answers: that change gets a sync of its own, at once."""
    async with Harness() as h:
        await h.start()
        backend = h.backend
        read = backend.get_pod_status
        reads = 0

        async def changing_while_read(ref: PodRef) -> PodState:
            nonlocal reads
            reads += 1
            state = await read(ref)
            if reads == 1:  # the container restarts just after the first answer
                backend.set_state(ref.uid, running(backend.configs[ref.uid], 0, restarts=1))
            return state

        backend.get_pod_status = changing_while_read  # type: ignore[method-assign]
        p = await h.add("web")
        assert h.current(p)["status"]["containerStatuses"][0]["restartCount"] == 1
        assert reads == 2


async def test_a_deleted_pod_costs_exactly_one_final_delete() -> None:
    async with Harness() as h:
        await h.start()
        pods = [h.kube.add_pod(pod_object(f"p{n}")) for n in range(PODS)]
        await settle()
        for p in pods:
            h.kube.mark_deleting(p, grace=30)
        await h.clock.advance(1)
        await h.clock.advance(60)
        deletes = h.kube.requests_to("DELETE", r"/pods/")
        assert Counter(d.path.rsplit("/", 1)[1] for d in deletes) == Counter(
            {f"p{n}": 1 for n in range(PODS)}
        )
        assert all(h.kube.pod("ns", f"p{n}") is None for n in range(PODS))
        assert per_pod(h, "PATCH", "/status") == Counter({f"p{n}": 1 for n in range(PODS)})


async def test_a_deletion_seen_twice_still_costs_one_delete() -> None:
    """The deletion's own updates (grace period shortened, finalizers) come back
    through the watch before the object is gone: none of them sends another DELETE."""
    async with Harness() as h:
        await h.start()
        p = h.kube.add_pod(pod_object("web"))
        await settle()
        h.kube.mark_deleting(p, grace=30)
        h.kube.update_pod(p, metadata={"deletionGracePeriodSeconds": 10})
        h.kube.update_pod(p, metadata={"labels": {"late": "yes"}})
        await h.clock.advance(1)
        await h.clock.advance(60)
        assert len(h.kube.requests_to("DELETE", r"/pods/web$")) == 1


async def test_watched_pods_are_kept_without_managed_fields() -> None:
    async with Harness() as h:
        controller: PodController = await h.start()
        p = pod_object("web")
        p["metadata"]["managedFields"] = [{"manager": "kubectl", "fieldsV1": {"f:spec": {}}}]
        h.kube.add_pod(p)
        await settle()
        (kept,) = controller.pods()
        assert "managedFields" not in kept["metadata"]
        assert kept["metadata"]["name"] == "web"


async def test_the_pod_gauge_counts_pods_without_walking_them_all() -> None:
    """The `vkpy_pods` gauge follows adds and deletes (kept as a count, not a scan, and
    shared by every node of the process)."""

    def gauge() -> float:
        return REGISTRY.get_sample_value("vkpy_pods") or 0.0

    async with Harness() as h:
        start = gauge()
        await h.start()
        pods = [h.kube.add_pod(pod_object(f"p{n}")) for n in range(5)]
        await settle()
        assert gauge() - start == 5
        h.kube.mark_deleting(pods[0], grace=0)
        await h.clock.advance(1)
        assert gauge() - start == 4
