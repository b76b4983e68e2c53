"""One host for every way to run (issue 28): a single node is a node set of one, and
keeps what it had; a static set registers its nodes only once the kubelet API they
point at listens. The host runs its real parts (sim backends, the kubelet API
listener on loopback) against the fake API server."""

from __future__ import annotations

import asyncio
import contextlib
import socket
import time
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from tests.unit.app.test_cli import settings
from tests.unit.fake_clock import FakeClock
from tests.unit.fake_kube import FakeKube
from vkpy.api import ListenError
from vkpy.fleet.host import NodeHost
from vkpy.fleet.leader import LeaderElector, LeadershipLost
from vkpy.fleet.membership import Elected, Static

NODES = "/api/v1/nodes$"


class WatchingKube(FakeKube):
    """The fake API server, remembering what each watch asked for."""

    def __init__(self, clock: FakeClock) -> None:
        super().__init__(clock)
        self.watches: list[tuple[str, dict[str, Any]]] = []

    async def stream_lines(self, path: str, query: Any, timeout: float) -> Any:
        self.watches.append((path, dict(query or {})))
        async for line in super().stream_lines(path, query, timeout):
            yield line


def free_ports(count: int) -> int:
    """The first of `count` consecutive free ports on loopback."""
    for _ in range(50):
        with socket.socket() as probe:
            probe.bind(("127.0.0.1", 0))
            first = int(probe.getsockname()[1])
        if first + count > 65535:
            continue
        taken = [socket.socket() for _ in range(count)]
        try:
            for n, s in enumerate(taken):
                s.bind(("127.0.0.1", first + n))
            return first
        except OSError:
            continue
        finally:
            for s in taken:
                s.close()
    raise RuntimeError("no free consecutive ports")


async def eventually(what: str, check: Callable[[], object], timeout: float = 10) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        await asyncio.sleep(0.02)


@contextlib.asynccontextmanager
async def running(host: NodeHost) -> AsyncIterator[asyncio.Task[None]]:
    task = asyncio.create_task(host.run())
    try:
        yield task
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        await host.stop()


def flags(tmp_path: Path, port: int, *more: str) -> list[str]:
    config = tmp_path / "sim.yaml"
    config.write_text("start_seconds: 0\n")
    return [
        "--provider=sim",
        f"--provider-config={config}",
        f"--state-dir={tmp_path / 'state'}",
        f"--port={port}",
        "--listen-address=127.0.0.1",
        "--node-ip=127.0.0.1",
        "--anonymous-auth",
        "--authorization-mode=AlwaysAllow",
        *more,
    ]


def bound(name: str, node: str) -> dict[str, Any]:
    return {
        "metadata": {"name": name, "namespace": "ns"},
        "spec": {"nodeName": node, "containers": [{"name": "app", "image": "busybox"}]},
    }


async def test_a_single_node_keeps_its_state_dir_its_own_watch_and_its_names(
    tmp_path: Path,
) -> None:
    """No --node-set: the set of one node keeps its backend's state in --state-dir
    itself (where an earlier run left its pods, to be adopted), watches only its own
    pods, names its IP and host name in its serving certificate, sends Events as
    itself, renews its own Lease and answers /runningpods/ from its backend."""
    port = free_ports(1)
    kube = WatchingKube(FakeClock())
    pod = kube.add_pod(bound("web", "solo"))
    host = NodeHost(settings(tmp_path, *flags(tmp_path, port, "--node-name=solo")), kube, Static())  # type: ignore[arg-type]
    async with running(host):
        await eventually(
            "the pod Running", lambda: kube.pod("ns", "web")["status"]["phase"] == "Running"
        )
        uid = pod["metadata"]["uid"]
        assert (tmp_path / "state" / "sim" / f"{uid}.json").is_file()
        assert not (tmp_path / "state" / "nodes").exists()
        pod_watches = [q for path, q in kube.watches if path == "/api/v1/pods"]
        assert [q.get("fieldSelector") for q in pod_watches] == ["spec.nodeName=solo"]
        assert host.api.deps.addresses == ("127.0.0.1", "solo")
        assert {e["source"]["host"] for e in kube.events()} == {"solo"}
        lease = kube.objects["/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases/solo"]
        assert lease["spec"]["holderIdentity"] == "solo"
        async with (
            aiohttp.ClientSession() as session,
            session.get(f"https://127.0.0.1:{port}/runningpods/", ssl=False) as answer,
        ):
            running_pods = (await answer.json())["items"]
        assert [(p["metadata"]["name"], p["metadata"]["uid"]) for p in running_pods] == [
            ("web", uid)
        ]


class PoolingKube(FakeKube):
    """The fake API server, remembering the pools asked of it (the same store here)."""

    def __init__(self, clock: FakeClock) -> None:
        super().__init__(clock)
        self.pools: list[int] = []

    def separate_pool(self, max_connections: int) -> FakeKube:
        self.pools.append(max_connections)
        return super().separate_pool(max_connections)


@pytest.mark.parametrize(("nodes", "pool"), [(1, 1), (3, 4), (1000, 125)])
def test_heartbeats_go_through_a_pool_of_their_own_for_one_node_as_for_many(
    tmp_path: Path, nodes: int, pool: int
) -> None:
    """A burst of pod work fills the main pool; the Lease of even a single node must
    not wait behind it (the kubelet's own heartbeat client)."""
    kube = PoolingKube(FakeClock())
    extra = [f"--nodes={nodes}"] if nodes > 1 else []
    s = settings(tmp_path, *flags(tmp_path, free_ports(1), "--node-name=n", *extra))
    NodeHost(s, kube, Static())  # type: ignore[arg-type]
    assert kube.pools == [pool]


async def test_a_node_set_registers_no_node_before_its_listener_listens(tmp_path: Path) -> None:
    """Each Node's status names the kubelet port; with the listener unable to listen
    there (the port is taken), no Node may be registered pointing at it."""
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = int(taken.getsockname()[1])
        kube = FakeKube(FakeClock())
        s = settings(tmp_path, *flags(tmp_path, port, "--node-name=set", "--nodes=3"))
        host = NodeHost(s, kube, Static())  # type: ignore[arg-type]
        with pytest.raises(ExceptionGroup) as failed:
            async with running(host) as task:
                await asyncio.wait_for(asyncio.shield(task), 30)
        assert failed.group_contains(ListenError)
        assert not kube.requests_to("POST", NODES)


async def test_a_node_set_registers_every_node_once_its_listener_listens(tmp_path: Path) -> None:
    port = free_ports(3)
    kube = FakeKube(FakeClock())
    s = settings(tmp_path, *flags(tmp_path, port, "--node-name=set", "--nodes=3"))
    host = NodeHost(s, kube, Static())  # type: ignore[arg-type]
    pod = kube.add_pod(bound("web", "set-1"))
    async with running(host):
        await eventually("three Nodes", lambda: len(kube.requests_to("POST", NODES)) == 3)
        assert host.api.listening.is_set()
        names = ["set-0", "set-1", "set-2"]
        assert sorted(r.body["metadata"]["name"] for r in kube.requests_to("POST", NODES)) == names
        leases = "/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases/"
        await eventually("a Lease each", lambda: all(leases + n in kube.objects for n in names))
        for name in names:  # each renewed by the node itself
            assert kube.objects[leases + name]["spec"]["holderIdentity"] == name
        await eventually(
            "the pod Running", lambda: kube.pod("ns", "web")["status"]["phase"] == "Running"
        )
        record = f"{pod['metadata']['uid']}.json"
        assert (tmp_path / "state" / "nodes" / "set-1" / "sim" / record).is_file()  # its node's


async def test_an_elected_node_runs_only_while_it_holds_the_leader_lease(tmp_path: Path) -> None:
    """A standby registers nothing and does not listen; once the leader's Lease has not
    been renewed for its duration it takes over, and when another replica takes the
    Lease from it, it stops with LeadershipLost."""
    clock = FakeClock()
    kube = FakeKube(clock)
    port = free_ports(1)
    s = settings(
        tmp_path,
        *flags(tmp_path, port, "--node-name=solo", "--leader-elect", "--leader-elect-identity=a"),
    )
    assert s.election is not None
    leases = f"/apis/coordination.k8s.io/v1/namespaces/{s.election.namespace}/leases"
    leader = f"{leases}/{s.election.name}"  # the flags' defaults name it
    lease = {
        "apiVersion": "coordination.k8s.io/v1",
        "kind": "Lease",
        "metadata": {"name": s.election.name, "namespace": s.election.namespace},
        "spec": {"holderIdentity": "b", "leaseDurationSeconds": 15, "renewTime": "x"},
    }
    await kube.create(leases, lease)
    host = NodeHost(s, kube, Elected(LeaderElector(kube, s.election, clock)), clock)  # type: ignore[arg-type]
    async with running(host) as task:
        await clock.advance(10)
        assert not kube.requests_to("POST", NODES)  # a standby
        assert not host.api.listening.is_set()
        await clock.advance(6)  # b has not renewed for the Lease's duration
        await eventually("the Node", lambda: kube.requests_to("POST", NODES))
        assert host.api.listening.is_set()
        assert kube.objects[leader]["spec"]["holderIdentity"] == "a"
        taken = {**kube.objects[leader], "spec": {**lease["spec"], "renewTime": "y"}}
        await kube.replace(leader, taken)  # b takes it back (a was cut off, say)
        await clock.advance(s.election.retry_period)
        with pytest.raises(LeadershipLost):
            await asyncio.wait_for(asyncio.shield(task), 10)


async def test_an_idle_node_of_a_set_keeps_four_tasks(tmp_path: Path) -> None:
    """Per node of a set: its serve, its status loop, its Lease, its pods (issue 30: six
    before; a backend with no task of its own gets no supervisor task, and the pod queue
    of a node on the shared watch runs in its controller's task)."""
    nodes = 20
    port = free_ports(nodes)
    kube = FakeKube(FakeClock())
    s = settings(tmp_path, *flags(tmp_path, port, "--node-name=set", f"--nodes={nodes}"))
    host = NodeHost(s, kube, Static())  # type: ignore[arg-type]
    before = len(asyncio.all_tasks())
    kube.add_pod(bound("web", "set-3"))
    async with running(host):
        await eventually("every node", lambda: len(kube.requests_to("POST", NODES)) == nodes)
        await eventually(
            "the pod Running", lambda: kube.pod("ns", "web")["status"]["phase"] == "Running"
        )
        await eventually(
            "the pod's worker gone", lambda: all(n.pods.idle() for n in host.served.values())
        )
        await asyncio.sleep(0.1)
        per_node = (len(asyncio.all_tasks()) - before) / nodes
        names = sorted({t.get_name() for t in asyncio.all_tasks()})
        assert per_node <= 4.5, (per_node, names)  # 4 each, and the host's few shared ones


async def test_a_node_someone_marked_unknown_is_ready_again_at_its_next_check(
    tmp_path: Path,
) -> None:
    """Issue 30, 5,000 nodes: the node lifecycle controller marked nodes Unknown while
    the API server was slow; they stayed NotReady until their 5-minute heartbeat. The
    host's one watch of its Nodes hands the change to the node, which writes its
    status at its next check (10 s); the other nodes write nothing."""
    clock = FakeClock()
    kube = FakeKube(clock)
    port = free_ports(3)
    # heartbeats a day apart: they fall at random points of it, and none in the test
    interval = "--node-status-interval=86400"
    s = settings(tmp_path, *flags(tmp_path, port, "--node-name=set", "--nodes=3", interval))
    host = NodeHost(s, kube, Static(), clock)  # type: ignore[arg-type]
    async with running(host):
        await eventually("three Nodes", lambda: len(kube.requests_to("POST", NODES)) == 3)
        await eventually("the node watch", lambda: kube.requests_to("WATCH", NODES))
        await clock.advance(20)  # every node past its first check
        unknown = [
            {"type": t, "status": "Unknown", "reason": "NodeStatusUnknown"}
            for t in ("Ready", "MemoryPressure", "DiskPressure", "PIDPressure")
        ]
        await kube.patch("/api/v1/nodes/set-1/status", {"status": {"conditions": unknown}})
        status_writes = len(kube.requests_to("PATCH", "/status$"))
        await clock.advance(20)
        await eventually("set-1 Ready", lambda: ready_of(kube, "set-1") == "True")
        assert [r.path for r in kube.requests_to("PATCH", "/status$")][status_writes:] == [
            "/api/v1/nodes/set-1/status"
        ]
        assert [ready_of(kube, n) for n in ("set-0", "set-2")] == ["True", "True"]


def ready_of(kube: FakeKube, node: str) -> str:
    conditions = kube.objects[f"/api/v1/nodes/{node}"]["status"]["conditions"]
    return str(next(c["status"] for c in conditions if c["type"] == "Ready"))
