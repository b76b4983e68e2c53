"""A burst of pods in one namespace costs a few Services LISTs, not one per pod, and
no pod gets a list older than its own request (a Service made before the pod asked
is in its environment, as with the kubelet's watch-fed cache)."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from vkpy.kube.client import ApiError
from vkpy.node.podspec.pod_config import ApiObjectSource


class Services:
    """An API server's Services LIST, held open until the test lets it answer."""

    def __init__(self) -> None:
        self.names: list[str] = []
        self.lists = 0
        self.gate = asyncio.Event()
        self.fail_next = False

    async def get(self, path: str) -> dict[str, Any]:
        assert path == "/api/v1/namespaces/shop/services"
        self.lists += 1
        seen = list(self.names)  # what the API server lists as the request arrives
        await self.gate.wait()
        if self.fail_next:
            self.fail_next = False
            raise ApiError(500, "InternalError", "etcd is away")
        return {"items": [{"metadata": {"name": n, "namespace": "shop"}} for n in seen]}


def names(listed: list[dict[str, Any]]) -> list[str]:
    return [item["metadata"]["name"] for item in listed]


async def test_a_burst_of_pods_shares_lists_and_each_sees_what_existed_when_it_asked() -> None:
    api = Services()
    source = ApiObjectSource(api)  # type: ignore[arg-type]
    api.names.append("db")
    first = asyncio.create_task(source.list_services("shop"))
    await asyncio.sleep(0)  # its LIST is on the wire
    api.names.append("cache")  # made after that LIST was answered by the API server
    burst = [asyncio.create_task(source.list_services("shop")) for _ in range(50)]
    await asyncio.sleep(0)
    api.gate.set()
    assert names(await first) == ["db"]
    for task in burst:
        assert names(await task) == ["db", "cache"]  # never the older answer
    assert api.lists == 2  # not 51


async def test_a_failed_list_fails_only_its_caller_and_the_others_list_again() -> None:
    api = Services()
    source = ApiObjectSource(api)  # type: ignore[arg-type]
    api.names.append("db")
    api.fail_next = True
    first = asyncio.create_task(source.list_services("shop"))
    await asyncio.sleep(0)
    waiting = [asyncio.create_task(source.list_services("shop")) for _ in range(3)]
    await asyncio.sleep(0)
    api.gate.set()
    with pytest.raises(ApiError):
        await first
    for task in waiting:
        assert names(await task) == ["db"]
    assert api.lists == 2


async def test_later_pods_get_a_fresh_list() -> None:
    api = Services()
    api.gate.set()
    source = ApiObjectSource(api)  # type: ignore[arg-type]
    assert names(await source.list_services("shop")) == []
    api.names.append("db")
    assert names(await source.list_services("shop")) == ["db"]
    assert api.lists == 2
