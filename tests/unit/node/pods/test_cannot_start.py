"""A pod whose containers cannot start stays Pending with the kubelet's waiting reason
and is tried again with back-off; only an admission rejection fails it (issue 31,
the Failed-pod storm: a ReplicaSet replaced each Failed pod at once, 3,150 Failed
pods in 5 minutes)."""

from __future__ import annotations

import itertools

from tests.unit.fake_kube import Obj
from tests.unit.pod_harness import Harness
from vkpy.providers.base import PodConfig
from vkpy.providers.errors import (
    AdmissionError,
    CannotStartError,
    InvalidInputError,
    UnsupportedError,
)

OUTSIDE = (
    "runAsUser 10001 is outside this node's pod id range 200000-265535 (pod_uid_range): "
    "it could be root's or a host user's"
)


def record_creates(h: Harness) -> list[float]:
    """The fake clock's time at each create the backend is asked for."""
    times: list[float] = []
    create = h.backend.create_pod

    async def timed(config: PodConfig) -> None:
        times.append(h.clock.time())
        await create(config)

    h.backend.create_pod = timed  # type: ignore[method-assign]
    return times


def gaps(times: list[float]) -> list[float]:
    return [round(b - a, 2) for a, b in itertools.pairwise(times)]


def waiting_of(h: Harness, pod: Obj) -> Obj:
    (container,) = h.current(pod)["status"]["containerStatuses"]
    assert set(container["state"]) == {"waiting"}, container
    return dict(container["state"]["waiting"])


def phases_written(h: Harness, pod: Obj) -> set[str]:
    return {p["status"]["phase"] for p in h.status_patches(pod) if "phase" in p["status"]}


async def test_a_pod_that_cannot_start_stays_pending_retried_with_growing_backoff() -> None:
    async with Harness(config_retry_max=10.0) as h:
        h.backend.fail(
            "create", CannotStartError(OUTSIDE, reason="CreateContainerConfigError"), times=10_000
        )
        creates = record_creates(h)
        await h.start()
        pod = await h.add("web")
        await h.clock.advance(600)
        status = h.current(pod)["status"]
        assert status["phase"] == "Pending"
        assert "Failed" not in phases_written(h, pod)  # not even for a moment
        assert waiting_of(h, pod) == {"reason": "CreateContainerConfigError", "message": OUTSIDE}
        # tried again and again, sooner at first, then every 10 s (config_retry_max)
        between = gaps(creates)
        assert 55 <= len(creates) <= 75, between
        assert between[0] < 0.5 and between[3] > between[0] * 4
        assert all(9.0 <= g <= 11.0 for g in between[-20:]), between
        # one Event, folded by the recorder
        (failed,) = h.kube.events("Failed")
        assert failed["type"] == "Warning"
        assert failed["message"] == f"Error: {OUTSIDE}"
        assert failed["count"] >= 50
        # once it can start, it runs, within the cap
        h.backend.errors.clear()
        await h.clock.advance(11)
        assert h.current(pod)["status"]["phase"] == "Running"


async def test_a_backend_refusing_the_pod_at_create_is_create_container_error_not_failed() -> None:
    """A backend that cannot ever run the pod as written (a volume type it lacks) is a
    runtime refusing a container: CreateContainerError, Pending, tried again."""
    async with Harness() as h:
        unsupported = UnsupportedError(
            "volume data: persistentVolumeClaim is not supported", reason="UnsupportedVolume"
        )
        h.backend.fail("create", unsupported, times=10_000)
        await h.start()
        pod = await h.add("claims")
        await h.clock.advance(120)
        assert h.current(pod)["status"]["phase"] == "Pending"
        assert "Failed" not in phases_written(h, pod)
        assert waiting_of(h, pod) == {
            "reason": "CreateContainerError",
            "message": "UnsupportedVolume: volume data: persistentVolumeClaim is not supported",
        }
        assert h.backend.count("create") >= 10
        h.backend.errors["create"] = [InvalidInputError("image is not a zip file")] * 10_000
        await h.clock.advance(30)
        assert waiting_of(h, pod) == {
            "reason": "CreateContainerError",
            "message": "ProviderFailed: image is not a zip file",
        }
        assert h.current(pod)["status"]["phase"] == "Pending"


async def test_only_the_containers_named_wait_with_the_reason() -> None:
    async with Harness() as h:
        missing = CannotStartError(
            "couldn't find key level in ConfigMap ns/settings",
            reason="CreateContainerConfigError",
            containers=("c1",),
        )
        h.backend.fail("create", missing, times=10_000)
        await h.start()
        pod = await h.add("two", containers=2)
        await h.clock.advance(5)
        states = {c["name"]: c["state"] for c in h.current(pod)["status"]["containerStatuses"]}
        assert states["c1"]["waiting"]["reason"] == "CreateContainerConfigError"
        assert states["c0"]["waiting"]["reason"] == "ContainerCreating"


async def test_a_failed_image_pull_backs_off_10_s_doubling_to_5_min() -> None:
    async with Harness() as h:
        message = 'Failed to pull image "img0:1": manifest unknown'
        h.backend.fail("create", CannotStartError(message, reason="ErrImagePull"), times=10_000)
        creates = record_creates(h)
        await h.start()
        pod = await h.add("web")
        assert waiting_of(h, pod) == {"reason": "ErrImagePull", "message": message}
        await h.clock.advance(5)
        assert waiting_of(h, pod) == {
            "reason": "ImagePullBackOff",
            "message": 'Back-off pulling image "img0:1"',
        }
        await h.clock.advance(1800)
        assert h.current(pod)["status"]["phase"] == "Pending"
        assert "Failed" not in phases_written(h, pod)
        between = gaps(creates)
        expected = [10, 20, 40, 80, 160, 300, 300, 300]
        assert len(between) >= len(expected), between
        for gap, delay in zip(between, expected, strict=False):
            assert delay <= gap <= delay * 1.1 + 11, between
        (back_off,) = h.kube.events("BackOff")
        assert back_off["type"] == "Normal"
        assert back_off["message"] == 'Back-off pulling image "img0:1"'
        assert back_off["involvedObject"]["fieldPath"] == "spec.containers{c0}"
        assert back_off["count"] >= 8
        failed = {e["message"]: e["count"] for e in h.kube.events("Failed")}
        assert set(failed) == {message, "Error: ErrImagePull", "Error: ImagePullBackOff"}
        assert failed[message] == len(creates)
        # a changed image is pulled at once, not after the back-off
        h.backend.errors.clear()
        pulls = len(creates)
        h.kube.update_pod(pod, spec={"containers": [{"name": "c0", "image": "img0:2"}]})
        await h.clock.advance(1)
        assert len(creates) == pulls + 1
        assert h.current(pod)["status"]["phase"] == "Running"


async def test_a_backend_admission_rejection_still_fails_the_pod() -> None:
    async with Harness() as h:
        h.backend.fail(
            "create",
            AdmissionError("requests 8 CPUs, the node has 4", reason="OutOfcpu"),
            times=10_000,
        )
        await h.start()
        pod = await h.add("big")
        await h.clock.advance(300)
        status = h.current(pod)["status"]
        assert (status["phase"], status["reason"]) == ("Failed", "OutOfcpu")
        assert status["message"] == "Pod was rejected: requests 8 CPUs, the node has 4"
        assert h.backend.count("create") == 1
        (event,) = h.kube.events("OutOfcpu")
        assert event["type"] == "Warning"


async def test_an_admission_rejection_by_the_kubelet_checks_still_fails_the_pod() -> None:
    async with Harness() as h:
        await h.start()
        pod = await h.add("win", os={"name": "windows"})
        await h.clock.advance(60)
        status = h.current(pod)["status"]
        assert (status["phase"], status["reason"]) == ("Failed", "PodOSNotSupported")
        assert h.backend.count("create") == 0
