"""A node set's one kubelet API listener answers for every node, not only the first:
each node advertises a port of its own, and the port a request comes in on decides
whose pods /pods lists, whose backend /stats/summary and /metrics/resource sample,
which node name the summary carries and which node authorization is asked about.
A node served by another replica (sharing the set) is answered 503, not wrongly."""

from __future__ import annotations

import asyncio
import contextlib
import socket
from collections.abc import AsyncIterator
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from tests.unit.streams_server import BareProvider
from vkpy.api import ApiDependencies, ApiSettings, KubeletServer
from vkpy.api.listener import REFUSED
from vkpy.api.settings import ConnectionLimits
from vkpy.providers.base import ContainerStats, PodRef, PodStats

T0 = datetime(2026, 12, 1, 12, 0, 0, tzinfo=UTC)


def pod(name: str, node: str) -> dict[str, Any]:
    return {
        "metadata": {"name": name, "namespace": "ns", "uid": f"uid-{name}"},
        "spec": {"nodeName": node, "containers": [{"name": "app", "image": "x"}]},
        "status": {"containerStatuses": [{"name": "app", "state": {"running": {}}}]},
    }


@dataclass
class NodeBackend(BareProvider):
    """One node's backend: it runs one pod and knows its stats."""

    pod_name: str = ""

    async def pod_stats(self) -> list[PodStats]:
        ref = PodRef("ns", self.pod_name, f"uid-{self.pod_name}")
        return [PodStats(ref, T0, (ContainerStats("app", T0, 3.0, 100, 200, 50),))]


class Reviews:
    """Accepts the token "good"; allows everything; remembers which node was asked."""

    def __init__(self) -> None:
        self.nodes: list[str] = []

    async def create(self, path: str, body: dict[str, Any]) -> dict[str, Any]:
        if body["kind"] == "TokenReview":
            return {"status": {"authenticated": True, "user": {"username": "sa"}}}
        self.nodes.append(body["spec"]["resourceAttributes"]["name"])
        return {"status": {"allowed": True}}


def free_ports(n: int) -> list[int]:
    sockets = [socket.socket() for _ in range(n)]
    try:
        for s in sockets:
            s.bind(("127.0.0.1", 0))
        return [int(s.getsockname()[1]) for s in sockets]
    finally:
        for s in sockets:
            s.close()


LIMITS = ConnectionLimits(max_connections=4, max_connections_per_client=2)


@pytest.fixture
async def node_set(tmp_path: Path) -> AsyncIterator[tuple[dict[str, int], Reviews]]:
    ports = dict(zip(("node-a", "node-b", "node-c"), free_ports(3), strict=True))
    pods = {"node-a": pod("pa", "node-a"), "node-b": pod("pb", "node-b")}
    backends = {n: NodeBackend(pod_name=p["metadata"]["name"]) for n, p in pods.items()}
    reviews = Reviews()
    shared = ApiDependencies(
        node_name="node-a",
        addresses=("127.0.0.1",),
        pods=lambda: list(pods.values()),
        find_pod=lambda ns, name, uid: None,
        provider=backends["node-a"],
        client=reviews,  # type: ignore[arg-type]
        events=None,  # type: ignore[arg-type]
        node_ports={port: name for name, port in ports.items()},
    )

    def for_node(name: str) -> ApiDependencies | None:
        if name not in pods:  # node-c: another replica serves it now
            return None
        return replace(
            shared,
            node_name=name,
            pods=lambda: [pods[name]],
            provider=backends[name],
            node_ports={},
        )

    server = KubeletServer(
        ApiSettings(
            listen_address="127.0.0.1",
            port=ports["node-a"],
            cert_dir=str(tmp_path / "certs"),
            authorization_mode="Webhook",
            limits=LIMITS,
        ),
        replace(shared, for_node=for_node),
    )
    task = asyncio.create_task(server.run())
    await asyncio.wait_for(server.listening.wait(), 10)
    yield ports, reviews
    task.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await task


async def test_each_nodes_port_answers_for_that_node(
    node_set: tuple[dict[str, int], Reviews],
) -> None:
    ports, reviews = node_set
    headers = {"Authorization": "Bearer good"}
    async with aiohttp.ClientSession(headers=headers) as session:
        for node, name in (("node-a", "pa"), ("node-b", "pb")):
            url = f"https://127.0.0.1:{ports[node]}"
            async with session.get(url + "/stats/summary", ssl=False) as answer:
                summary = await answer.json()
            assert summary["node"]["nodeName"] == node
            assert [p["podRef"]["name"] for p in summary["pods"]] == [name]
            async with session.get(url + "/pods", ssl=False) as answer:
                assert [p["metadata"]["name"] for p in (await answer.json())["items"]] == [name]
            async with session.get(url + "/metrics/resource", ssl=False) as answer:
                assert f'pod="{name}"' in await answer.text()
            assert set(reviews.nodes) == {node}  # authorized against this node's name
            reviews.nodes.clear()
        async with session.get(f"https://127.0.0.1:{ports['node-c']}/pods", ssl=False) as answer:
            assert answer.status == 503
            assert "node-c" in await answer.text()


async def test_each_node_has_a_kubelets_connection_limits(
    node_set: tuple[dict[str, int], Reviews],
) -> None:
    """metrics-server (one client address) keeps a connection to every node it scrapes,
    as it would to every kubelet: with the caps shared by the set's ports, a 1000-node
    set reset all but 256 of them at once and each scrape was a new TLS handshake
    (100 a second, issue 17). Each node's port counts its own connections."""
    ports, _ = node_set
    headers = {"Authorization": "Bearer good"}
    sessions = [
        aiohttp.ClientSession(headers=headers) for _ in range(LIMITS.max_connections_per_client)
    ]
    try:
        for session in sessions:  # each session holds one connection to each node
            for port in ports.values():
                async with session.get(f"https://127.0.0.1:{port}/healthz", ssl=False) as answer:
                    assert answer.status == (503 if port == ports["node-c"] else 200)
        for session in sessions:  # and keeps it: nothing was reset
            for port in ports.values():
                async with session.get(f"https://127.0.0.1:{port}/healthz", ssl=False) as answer:
                    assert answer.status == (503 if port == ports["node-c"] else 200)
    finally:
        for session in sessions:
            await session.close()


async def test_the_sets_ports_together_stay_within_the_process_cap(tmp_path: Path) -> None:
    """Per-port caps alone would let a client hold N times a kubelet's connections on
    a set of N nodes, up to the open-file limit, and leave the agent no descriptor for
    its own heartbeats: all ports together stop at the process's cap (by default a
    share of the open-file limit; here 3), refusing the rest as `process`."""
    ports = free_ports(3)
    pods = {"pa": pod("pa", "node-a")}
    shared = ApiDependencies(
        node_name="node-a",
        addresses=("127.0.0.1",),
        pods=lambda: list(pods.values()),
        find_pod=lambda ns, name, uid: None,
        provider=NodeBackend(pod_name="pa"),
        client=Reviews(),  # type: ignore[arg-type]
        events=None,  # type: ignore[arg-type]
        node_ports={port: f"node-{n}" for n, port in enumerate(ports)},
    )
    limits = replace(LIMITS, max_connections_process=3)
    server = KubeletServer(
        ApiSettings(
            listen_address="127.0.0.1", port=ports[0], cert_dir=str(tmp_path), limits=limits
        ),
        replace(shared, for_node=lambda name: replace(shared, node_name=name, node_ports={})),
    )
    task = asyncio.create_task(server.run())
    await asyncio.wait_for(server.listening.wait(), 10)
    refused = REFUSED.labels("process")._value.get()
    sessions = [aiohttp.ClientSession() for _ in range(2)]
    try:
        held = 0
        for session in sessions:  # 2 per port would be within each port's caps
            for port in ports:
                try:
                    async with session.get(f"https://127.0.0.1:{port}/healthz", ssl=False):
                        held += 1
                except aiohttp.ClientConnectionError:
                    pass
        assert held == 3
        assert REFUSED.labels("process")._value.get() - refused == 3
        await sessions[0].close()  # the one holding them goes: they count no more

        async def answered() -> bool:
            async with aiohttp.ClientSession() as again:
                try:
                    url = f"https://127.0.0.1:{ports[2]}/healthz"
                    async with again.get(url, ssl=False):
                        return True  # an answer (401: no credentials), not a reset
                except aiohttp.ClientConnectionError:
                    return False

        for _ in range(100):  # until the server has seen the closes
            if await answered():
                break
            await asyncio.sleep(0.02)
        else:
            raise AssertionError("still refused after the connections closed")
    finally:
        for session in sessions:
            await session.close()
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
