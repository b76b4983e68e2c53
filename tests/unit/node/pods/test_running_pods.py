"""/runningpods/ comes from the backend's list, as the kubelet's comes from its runtime."""

from __future__ import annotations

from tests.unit.fake_clock import settle
from tests.unit.pod_harness import Harness
from vkpy.kube.client import ApiError


async def test_running_pods_lists_what_the_backend_runs_not_what_the_api_says() -> None:
    """Defect 13: right after a create the API status may lag (here its write fails),
    and a pod the backend lost may still be Running on the API."""
    async with Harness() as h:
        controller = await h.start()
        lost = await h.add("lost", restartPolicy="Never")
        assert h.current(lost)["status"]["phase"] == "Running"
        h.backend.lose(lost["metadata"]["uid"])
        h.kube.fail("PATCH", r"/pods/fresh/status$", ApiError(500, "InternalError", "x"), 99)
        fresh = await h.add("fresh", containers=2)
        assert "containerStatuses" not in h.current(fresh)["status"]
        listed = await controller.running_pods()
        assert [p["metadata"]["uid"] for p in listed] == [fresh["metadata"]["uid"]]
        assert listed[0]["spec"]["containers"] == [
            {"name": "c0", "image": "img0:1"},
            {"name": "c1", "image": "img1:1"},
        ]
        assert h.current(lost)["status"]["phase"] == "Running"  # the API is behind
        await settle()
