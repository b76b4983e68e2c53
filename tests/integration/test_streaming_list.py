"""The pod watch's first state from a streaming list, against the real API server
(issue 17): a watch with sendInitialEvents hands over every pod bound to the node as
one complete list, with no LIST request, then goes on as a watch on the same stream."""

from __future__ import annotations

import asyncio
import secrets
from typing import Any

from tests.integration.agent import Kube, sim_pod
from vkpy.core import metrics
from vkpy.devcluster import ClusterAccess
from vkpy.kube.client import ClientOptions, KubeClient
from vkpy.kube.watch import Watcher, WatchOptions


class Seen:
    def __init__(self) -> None:
        self.lists: list[list[str]] = []
        self.events: list[tuple[str, str]] = []

    def replace(self, items: list[dict[str, Any]]) -> None:
        self.lists.append(sorted(i["metadata"]["name"] for i in items))

    def apply(self, event_type: str, obj: dict[str, Any]) -> None:
        self.events.append((event_type, obj["metadata"]["name"]))


def requests(method: str) -> float:
    return sum(
        sample.value
        for family in metrics.API_REQUESTS.collect()
        for sample in family.samples
        if sample.name.endswith("_total") and sample.labels.get("method") == method
    )


def test_the_first_state_is_streamed_not_listed(cluster: ClusterAccess, kube: Kube) -> None:
    node = f"nowhere-{secrets.token_hex(3)}"  # no such node: the pods stay Pending
    for n in range(3):
        kube.create(sim_pod(f"s{n}", node))

    async def scenario() -> tuple[Seen, float]:
        client = await KubeClient.connect(ClientOptions(kubeconfig=str(cluster.kubeconfig)))
        seen = Seen()
        watcher = Watcher(
            client,
            WatchOptions(
                path="/api/v1/pods", field_selector=f"spec.nodeName={node}", stream_initial=True
            ),
            seen,
        )
        lists_before = requests("GET")
        task = asyncio.create_task(watcher.run())
        try:
            await asyncio.wait_for(watcher.synced.wait(), 60)
            listed = requests("GET") - lists_before
            await asyncio.to_thread(kube.create, sim_pod("s3", node))
            async with asyncio.timeout(60):
                while ("ADDED", "s3") not in seen.events:
                    await asyncio.sleep(0.1)
        finally:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
            await client.close()
        return seen, listed

    seen, listed = asyncio.run(scenario())
    assert seen.lists == [["s0", "s1", "s2"]]
    assert listed == 0
    assert ("ADDED", "s3") in seen.events
