"""Slow provisioning on the ACI node: ACI (our emulator) takes its time to provision
groups and to end their deployments' operations; the pods wait in ContainerCreating,
then all run, each in the one group made for it (never a duplicate, never redeployed).
"""
# ruff: noqa: F811 - pytest fixtures are imported by name and then requested as arguments

from __future__ import annotations

from typing import Any

from tests.integration.aci_fixtures import AciSetup, aci, aci_emulator  # noqa: F401
from tests.integration.agent import Kube, wait_for
from tests.integration.conftest import StartAgent
from tests.integration.test_aci_agent import aci_pod, phase_is, start_aci
from vkpy.providers import owner_tags

PODS = ("slow-0", "slow-1", "slow-2")


def test_slow_provisioning_converges_without_duplicate_groups(
    kube: Kube, start_agent: StartAgent, aci: AciSetup
) -> None:
    emulator = aci.emulator.emulator
    timing, faults = emulator.timing, emulator.faults
    saved = (timing.pending, timing.pulling, faults.operation_delay)
    timing.pending, timing.pulling, faults.operation_delay = 4.0, 3.0, 12.0
    try:
        agent = start_aci(start_agent, aci)

        def puts() -> int:
            return sum(n for k, n in aci.emulator.store.calls.items() if k.startswith("PUT "))

        def lists() -> int:
            calls = aci.emulator.store.calls.items()
            return sum(
                n for k, n in calls if k.startswith("GET ") and k.endswith("/containerGroups")
            )

        before = puts()
        uids = {kube.create(aci_pod(name, agent.node_name))["metadata"]["uid"] for name in PODS}

        def groups() -> dict[str, list[Any]]:
            found: dict[str, list[Any]] = {uid: [] for uid in uids}
            for group in list(aci.emulator.store.groups.values()):
                uid = (group.model.tags or {}).get(owner_tags.UID)
                if uid in found:
                    found[uid].append(group)
            return found

        seen_creating: set[str] = set()

        def creating() -> bool:
            # each pod seen waiting in ContainerCreating (not all at once: on a loaded
            # machine the first may run before the last is created)
            for name in PODS:
                pod = kube.get("pod", name) or {}
                statuses = pod.get("status", {}).get("containerStatuses") or [{}]
                waiting = (statuses[0].get("state") or {}).get("waiting") or {}
                if waiting.get("reason") == "ContainerCreating":
                    seen_creating.add(name)
            return seen_creating == set(PODS)

        wait_for("each pod waiting in ContainerCreating", creating, timeout=90)
        first = groups()
        assert all(len(g) == 1 for g in first.values())
        for name in PODS:
            wait_for(f"{name} Running", phase_is(kube, name, "Running"), timeout=120)
        ours = [g[0] for g in first.values()]
        operations = [op for op in aci.emulator.store.operations.values() if op.group in ours]
        assert len(operations) == len(PODS)
        wait_for(
            "vkpy told that the deployments succeeded",
            lambda: all(op.status == "Succeeded" for op in operations),
        )
        listed = lists()
        wait_for("two more rounds of vkpy's monitor", lambda: lists() >= listed + 2)
        last = groups()
        for uid, (group,) in last.items():
            assert group is first[uid][0]  # the group made first, not a second deployment
            assert group.provisioning == "Succeeded"
        assert puts() - before == len(PODS)  # one PUT per pod: nothing deployed twice
    finally:
        timing.pending, timing.pulling, faults.operation_delay = saved
