"""The pod phase from container states, by the kubelet's getPhase rules."""

import pytest

from vkpy.providers.base import ContainerState
from vkpy.providers.process.phase import pod_phase

RUNNING = ContainerState("c", "running")
CREATING = ContainerState("c", "waiting", reason="ContainerCreating")
OK = ContainerState("c", "terminated", exit_code=0)
FAILED = ContainerState("c", "terminated", exit_code=1)
BACKOFF = ContainerState("c", "waiting", reason="CrashLoopBackOff", last_terminated=FAILED)


@pytest.mark.parametrize(
    ("policy", "apps", "phase"),
    [
        ("Always", [CREATING], "Pending"),
        ("Always", [RUNNING, CREATING], "Pending"),
        ("Always", [RUNNING, BACKOFF], "Running"),
        ("Always", [BACKOFF], "Running"),
        ("Always", [OK], "Running"),
        ("OnFailure", [OK, OK], "Succeeded"),
        ("OnFailure", [OK, BACKOFF], "Running"),
        ("OnFailure", [OK, RUNNING], "Running"),
        ("Never", [OK, OK], "Succeeded"),
        ("Never", [OK, FAILED], "Failed"),
        ("Never", [RUNNING, FAILED], "Running"),
    ],
)
def test_app_containers(policy: str, apps: list[ContainerState], phase: str) -> None:
    assert pod_phase(policy, [], [], apps, init_failed=False) == phase


def test_init_containers() -> None:
    waiting = ContainerState("c", "waiting", reason="PodInitializing")
    assert pod_phase("Always", [RUNNING], [False], [waiting], False) == "Pending"
    assert pod_phase("Always", [BACKOFF], [False], [waiting], False) == "Pending"
    assert pod_phase("Never", [FAILED], [False], [waiting], True) == "Failed"
    assert pod_phase("Always", [OK], [False], [RUNNING], False) == "Running"
    # A running sidecar counts as initialized; after the app ended it no longer matters.
    assert pod_phase("Never", [RUNNING], [True], [RUNNING], False) == "Running"
    assert pod_phase("Never", [OK], [True], [OK], False) == "Succeeded"
    assert pod_phase("Never", [CREATING], [True], [waiting], False) == "Pending"
