"""How the pod controller waits: back-off for what fails, a capped back-off for a
missing ConfigMap or Secret, and timers of their own for deadlines and token
renewal, none of which cancels another."""

from __future__ import annotations

from tests.unit.pod_harness import Harness
from tests.unit.pod_harness import pod as pod_object
from vkpy.providers.base import ContainerState, PodState
from vkpy.providers.errors import RetryableError


def running_state(uid: str) -> PodState:
    return PodState(
        phase="Running", containers=(ContainerState(name="c0", state="running", ready=True),)
    )


ENV_FROM_MISSING = [
    {
        "name": "c0",
        "image": "img:1",
        "env": [
            {
                "name": "LEVEL",
                "valueFrom": {"configMapKeyRef": {"name": "settings", "key": "level"}},
            }
        ],
    }
]

TOKEN_VOLUME = {
    "name": "token",
    "projected": {
        "sources": [{"serviceAccountToken": {"path": "token", "expirationSeconds": 3600}}]
    },
}


async def test_missing_config_map_is_retried_with_capped_backoff() -> None:
    """Defect 2: not every 0.2 s forever; back off up to config_retry_max, one
    aggregated Event, and start as soon as the ConfigMap exists (within the cap)."""
    async with Harness(config_retry_max=10.0) as h:
        await h.start()
        pod = await h.add("cfg", containers=ENV_FROM_MISSING)
        await h.clock.advance(120)
        lookups = h.kube.requests_to("GET", r"/configmaps/settings$")
        # 0.2, 0.4, ... 6.4 s, then every 10 s: about 18 in two minutes (not 600)
        assert 10 <= len(lookups) <= 25
        status = h.current(pod)["status"]
        assert status["containerStatuses"][0]["state"]["waiting"]["reason"] == (
            "CreateContainerConfigError"
        )
        failed = h.kube.events("Failed")
        assert len({e["involvedObject"]["uid"] for e in failed}) == 1
        assert len(failed) == 1 and failed[0]["count"] >= 10
        h.kube.objects["/api/v1/namespaces/ns/configmaps/settings"] = {
            "metadata": {"name": "settings", "namespace": "ns"},
            "data": {"level": "debug"},
        }
        await h.clock.advance(11)
        assert h.current(pod)["status"]["phase"] == "Running"


async def test_quiet_pod_on_a_push_backend_gets_its_token_renewed() -> None:
    """Defect 3: renewal is due at 80% of the token's hour; a pod nobody touches must
    still get a fresh token before the old one expires, and again after that."""
    async with Harness() as h:
        await h.start()
        pod = await h.add("web", volumes=[TOKEN_VOLUME], serviceAccountName="default")
        uid = pod["metadata"]["uid"]
        assert h.current(pod)["status"]["phase"] == "Running"
        await h.clock.advance(3000)
        assert h.backend.count("refresh", uid) == 1
        await h.clock.advance(3000)
        assert h.backend.count("refresh", uid) == 2


async def test_adopted_pod_with_tokens_is_renewed_at_once_then_on_time() -> None:
    async with Harness() as h:
        pod = h.kube.add_pod(pod_object("web", volumes=[TOKEN_VOLUME], serviceAccountName="sa"))
        ref = h.ref(pod)
        h.backend.refs[ref.uid] = ref
        h.backend.states[ref.uid] = running_state(ref.uid)
        await h.start()
        assert h.backend.count("refresh", ref.uid) == 1  # renewal time unknown: now
        assert h.backend.count("create") == 0
        await h.clock.advance(2881)
        assert h.backend.count("refresh", ref.uid) == 2


async def test_failed_token_renewal_is_tried_again_soon() -> None:
    async with Harness() as h:
        await h.start()
        pod = await h.add("web", volumes=[TOKEN_VOLUME], serviceAccountName="sa")
        uid = pod["metadata"]["uid"]
        h.backend.fail("refresh", RetryableError("busy"))
        await h.clock.advance(2881)
        assert h.backend.count("refresh", uid) == 1
        await h.clock.advance(11)
        assert h.backend.count("refresh", uid) == 2
        assert len(h.backend.refreshed) == 1


async def test_a_backends_retry_after_is_honoured() -> None:
    """A throttled backend says when to come back (Azure's Retry-After): the pod is
    not tried again sooner, whatever its own back-off (0.2 s at first) would say,
    and is tried soon after; a hint while reading the state counts the same."""
    async with Harness() as h:
        await h.start()
        h.backend.fail("create", RetryableError("throttled", retry_after=7.0))
        pod = await h.add("web")
        uid = pod["metadata"]["uid"]
        await h.clock.advance(6.9)
        assert h.backend.count("create", uid) == 1
        await h.clock.advance(1.0)
        assert h.backend.count("create", uid) == 2
        assert h.current(pod)["status"]["phase"] == "Running"

        h.backend.fail("status", RetryableError("throttled", retry_after=20.0))
        h.kube.update_pod(pod, metadata={"labels": {"tier": "front"}})  # a sync
        await h.clock.advance(19.9)
        assert h.backend.count("status", uid) == 2
        await h.clock.advance(1.0)
        assert h.backend.count("status", uid) == 3


async def test_retry_after_holds_back_a_token_renewal_and_the_first_list() -> None:
    async with Harness() as h:
        h.backend.fail("list", RetryableError("starting", retry_after=12.0))
        controller = await h.start()
        await h.clock.advance(11.9)
        assert not controller.ready.is_set()
        assert h.backend.count("list") == 1
        await h.clock.advance(0.2)
        assert controller.ready.is_set()

        pod = await h.add("web", volumes=[TOKEN_VOLUME], serviceAccountName="sa")
        uid = pod["metadata"]["uid"]
        h.backend.fail("refresh", RetryableError("busy", retry_after=30.0))
        await h.clock.advance(2881)
        assert h.backend.count("refresh", uid) == 1
        await h.clock.advance(28)  # its own TOKEN_RETRY (10 s) would have come
        assert h.backend.count("refresh", uid) == 1
        await h.clock.advance(3)
        assert h.backend.count("refresh", uid) == 2
        assert len(h.backend.refreshed) == 1
