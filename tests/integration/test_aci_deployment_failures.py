"""Deployments that ARM accepted and that then failed: capacity and quota failures
(`ServiceUnavailable`, `ContainerGroupQuotaReached`) are deployed again with back-off,
the platform's words on the pending pod meanwhile, until the pod runs in one group;
an image ACI cannot pull (`InaccessibleImage`) leaves the pod Pending with
ErrImagePull and an Event, deployed again after the kubelet's image back-off.
Against the emulator, through the real SDK and kubectl.
"""
# ruff: noqa: F811 - pytest fixtures are imported by name and then requested as arguments

from __future__ import annotations

import time
from typing import Any

from tests.integration.aci_fixtures import AciSetup, aci, aci_emulator  # noqa: F401
from tests.integration.agent import Kube, wait_for
from tests.integration.cannot_start import cannot_start
from tests.integration.conftest import StartAgent
from tests.integration.test_aci_agent import aci_pod, events, phase_is, ref_of, start_aci
from vkpy.providers import owner_tags
from vkpy.providers.aci.naming import group_name


def test_capacity_failures_are_retried_and_an_inaccessible_image_keeps_the_pod_pending(
    kube: Kube, start_agent: StartAgent, aci: AciSetup
) -> None:
    agent = start_aci(start_agent, aci)
    faults = aci.emulator.faults
    faults.deployment_failures = ["ServiceUnavailable"] + ["ContainerGroupQuotaReached"] * 3
    patient = kube.create(aci_pod("patient", agent.node_name))

    def waiting_for_quota() -> Any:
        pod = kube.get("pod", "patient") or {}
        status = pod.get("status", {})
        return (
            status.get("phase") == "Pending"
            and status.get("reason") == "ContainerGroupQuotaReached"
            and status
        )

    status = wait_for("the quota error on the pending pod", waiting_for_quota, timeout=60)
    assert "quota exceeded in region" in status["message"]
    waiting = status["containerStatuses"][0]["state"]["waiting"]
    assert waiting["reason"] == "ContainerGroupQuotaReached"
    running = wait_for("patient Running", phase_is(kube, "patient", "Running"), timeout=120)
    assert not running["status"].get("reason")
    assert faults.deployment_failures == []  # every failure was met by a new deployment
    seen = events(kube, "patient")
    assert "is not available in the location" in seen["ServiceUnavailable"]
    assert "quota exceeded" in seen["ContainerGroupQuotaReached"]
    quota_events = [
        e for e in kube.events("patient") if e["reason"] == "ContainerGroupQuotaReached"
    ]
    assert sum(e.get("count", 1) for e in quota_events) == 3
    # one group for the pod, never a duplicate
    tagged = [
        g
        for g in aci.emulator.store.groups.values()
        if (g.model.tags or {}).get(owner_tags.UID) == patient["metadata"]["uid"]
    ]
    assert [g.name for g in tagged] == [group_name(ref_of(patient))]

    lost = {
        "name": "app",
        "image": "busybox-does-not-exist:1",
        "resources": {"requests": {"cpu": "100m", "memory": "100M"}},
    }
    kube.create(aci_pod("lost", agent.node_name, [lost]))
    # an image ACI cannot pull: Pending with ErrImagePull, deployed again after the
    # kubelet's image back-off, never Failed (a ReplicaSet would replace it: issue 31)
    refused = cannot_start(kube, "lost")
    assert refused["reason"] == "ErrImagePull"
    assert refused["message"].startswith("InaccessibleImage: ")
    assert "busybox-does-not-exist:1" in refused["message"]
    assert "is not accessible" in refused["message"]
    wait_for("its Event", lambda: "InaccessibleImage" in events(kube, "lost"))
    name = group_name(ref_of(refused["pod"]))
    group = aci.emulator.group(name, aci.resource_group)
    assert group is not None and group.provisioning == "Failed"
    first = group.created

    def deployed_again() -> bool:
        again = aci.emulator.group(name, aci.resource_group)
        return again is not None and again.created > first

    wait_for("deployed again after the 10 s back-off", deployed_again, timeout=30)
    assert time.time() - first >= 10
    assert phase_is(kube, "lost", "Pending")


def test_a_put_refused_for_quota_keeps_the_pod_pending_with_acis_words_until_it_runs(
    kube: Kube, start_agent: StartAgent, aci: AciSetup
) -> None:
    agent = start_aci(start_agent, aci)
    faults = aci.emulator.faults
    faults.max_groups = len(aci.emulator.store.groups)  # ARM refuses the next group's PUT
    small = {
        "name": "app",
        "image": "busybox",
        "resources": {"requests": {"cpu": "100m", "memory": "100M"}},
    }
    queued = kube.create(aci_pod("queued", agent.node_name, [small]))

    def waiting_for_quota() -> Any:
        status = (kube.get("pod", "queued") or {}).get("status", {})
        return (
            status.get("phase") == "Pending"
            and status.get("reason") == "ContainerGroupQuotaReached"
            and status
        )

    status = wait_for("ARM's quota refusal on the pending pod", waiting_for_quota, timeout=60)
    assert "container group quota" in status["message"] and "exceeded" in status["message"]
    waiting = status["containerStatuses"][0]["state"]["waiting"]
    assert waiting["reason"] == "ContainerGroupQuotaReached"
    wait_for("its Event", lambda: "ContainerGroupQuotaReached" in events(kube, "queued"))
    assert aci.emulator.group(group_name(ref_of(queued)), aci.resource_group) is None
    faults.max_groups = None  # quota freed
    running = wait_for("queued Running", phase_is(kube, "queued", "Running"), timeout=90)
    assert not running["status"].get("reason") and not running["status"].get("message")
    tagged = [
        g
        for g in aci.emulator.store.groups.values()
        if (g.model.tags or {}).get(owner_tags.UID) == queued["metadata"]["uid"]
    ]
    assert [g.name for g in tagged] == [group_name(ref_of(queued))]
