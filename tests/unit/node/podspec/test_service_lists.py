"""A pod's service-link variables come from one watch of every Service, as a
kubelet's come from its informer: a burst of pods asks the API server nothing, and
each pod sees the Services the watch has brought (made, changed, deleted). When the
watch cannot list, pods fall back to a LIST of their namespace, shared by the pods
that ask at the same time, and no pod gets a list older than its own request."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from tests.unit.fake_clock import FakeClock, settle
from tests.unit.fake_kube import FakeKube
from vkpy.kube.client import ApiError
from vkpy.node.podspec.pod_config import ApiObjectSource
from vkpy.node.podspec.service_cache import ServiceCache
from vkpy.node.podspec.service_env import service_variables
from vkpy.node.podspec.shared_lists import SharedLists


def names(listed: list[dict[str, Any]]) -> list[str]:
    return [item["metadata"]["name"] for item in listed]


def service(
    name: str, ip: str = "10.96.0.10", port: int = 5432, namespace: str = "shop", **extra: Any
) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": name, "namespace": namespace, **extra.pop("metadata", {})},
        "spec": {"clusterIP": ip, "ports": [{"name": "db", "port": port, "protocol": "TCP"}]},
        **extra,
    }


async def test_a_burst_of_pods_reads_the_watched_services_and_lists_nothing() -> None:
    clock = FakeClock()
    kube = FakeKube(clock)
    await kube.create("/api/v1/namespaces/shop/services", service("db"))
    await kube.create("/api/v1/namespaces/other/services", service("elsewhere", namespace="other"))
    source = ApiObjectSource(kube, clock)  # type: ignore[arg-type]
    try:
        burst = await asyncio.gather(*(source.list_services("shop") for _ in range(50)))
        assert all(names(listed) == ["db"] for listed in burst)
        assert len(kube.requests_to("WATCH", "^/api/v1/services$")) == 1
        assert not kube.requests_to("GET", "services")  # no LIST: a streaming watch
    finally:
        await source.close()


async def test_services_made_changed_and_deleted_reach_the_next_pod() -> None:
    clock = FakeClock()
    kube = FakeKube(clock)
    await kube.create("/api/v1/namespaces/shop/services", service("db"))
    source = ApiObjectSource(kube, clock)  # type: ignore[arg-type]
    try:
        assert names(await source.list_services("shop")) == ["db"]
        await kube.create("/api/v1/namespaces/shop/services", service("cache", "10.96.0.11"))
        await kube.replace("/api/v1/namespaces/shop/services/db", service("db", port=6432))
        await settle()
        listed = await source.list_services("shop")
        assert names(listed) == ["cache", "db"]  # by name, as a LIST orders them
        assert ("DB_SERVICE_PORT", "6432") in service_variables(listed)
        await kube.delete("/api/v1/namespaces/shop/services/db")
        await settle()
        assert names(await source.list_services("shop")) == ["cache"]
        assert names(await source.list_services("nothing-here")) == []
        assert not kube.requests_to("GET", "services")
    finally:
        await source.close()


def test_a_service_is_kept_as_what_its_variables_need() -> None:
    full = service(
        "db",
        metadata={"annotations": {"note": "x" * 4000}, "managedFields": [{"manager": "kubectl"}]},
        status={"loadBalancer": {}},
    )
    full["spec"]["selector"] = {"app": "db"}
    full["spec"]["ports"].append({"port": 9187, "targetPort": 9187, "protocol": "TCP"})
    cache = ServiceCache(None, lambda namespace: asyncio.sleep(0, []))  # type: ignore[arg-type]
    cache.table.replace([full])
    [kept] = cache.table.services("shop")
    assert "x" * 4000 not in repr(kept)
    assert service_variables([kept]) == service_variables([full])


async def test_a_watch_that_cannot_list_falls_back_to_a_list_per_burst() -> None:
    """A role without `watch` on Services (the chart's before this change): after the
    first pod's wait, pods list their namespace, a LIST per burst."""
    clock = FakeClock()
    kube = FakeKube(clock)
    await kube.create("/api/v1/namespaces/shop/services", service("db"))
    forbidden = ApiError(403, "Forbidden", "cannot watch resource services")
    kube.fail("WATCH", "^/api/v1/services$", forbidden, times=1000)
    kube.fail("GET", "^/api/v1/services$", forbidden, times=1000)

    async def list_namespace(namespace: str) -> list[dict[str, Any]]:
        answer = await kube.get(f"/api/v1/namespaces/{namespace}/services")
        return list(answer["items"])

    cache = ServiceCache(kube, list_namespace, clock, first_list_wait=0.05)  # type: ignore[arg-type]
    try:
        assert names(await cache.services("shop")) == ["db"]
        burst = await asyncio.gather(*(cache.services("shop") for _ in range(20)))
        assert all(names(listed) == ["db"] for listed in burst)
        assert kube.requests_to("GET", "^/api/v1/namespaces/shop/services$")
        assert not cache.synced
    finally:
        await cache.close()


class Services:
    """An API server's Services LIST, held open until the test lets it answer."""

    def __init__(self) -> None:
        self.names: list[str] = []
        self.lists = 0
        self.gate = asyncio.Event()
        self.fail_next = False

    async def list(self, namespace: str) -> list[dict[str, Any]]:
        assert namespace == "shop"
        self.lists += 1
        seen = list(self.names)  # what the API server lists as the request arrives
        await self.gate.wait()
        if self.fail_next:
            self.fail_next = False
            raise ApiError(500, "InternalError", "etcd is away")
        return [{"metadata": {"name": n, "namespace": "shop"}} for n in seen]


async def test_a_burst_of_fallback_lists_is_shared_and_each_sees_what_existed_when_it_asked() -> (
    None
):
    api = Services()
    lists = SharedLists(api.list)
    api.names.append("db")
    first = asyncio.create_task(lists.get("shop"))
    await asyncio.sleep(0)  # its LIST is on the wire
    api.names.append("cache")  # made after that LIST was answered by the API server
    burst = [asyncio.create_task(lists.get("shop")) for _ in range(50)]
    await asyncio.sleep(0)
    api.gate.set()
    assert names(await first) == ["db"]
    for task in burst:
        assert names(await task) == ["db", "cache"]  # never the older answer
    assert api.lists == 2  # not 51


async def test_a_failed_fallback_list_fails_only_its_caller_and_the_others_list_again() -> None:
    api = Services()
    lists = SharedLists(api.list)
    api.names.append("db")
    api.fail_next = True
    first = asyncio.create_task(lists.get("shop"))
    await asyncio.sleep(0)
    waiting = [asyncio.create_task(lists.get("shop")) for _ in range(3)]
    await asyncio.sleep(0)
    api.gate.set()
    with pytest.raises(ApiError):
        await first
    for task in waiting:
        assert names(await task) == ["db"]
    assert api.lists == 2
